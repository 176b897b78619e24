package main

// token denied: the api's refused-call trail (ListAccessDenied).

import (
	"context"
	"fmt"
	"text/tabwriter"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func runTokenDenied(ctx context.Context, r *remote, o *tokenAuditOpts, args []string) error {
	if len(args) != 0 {
		return usagef("takes no arguments, got %d", len(args))
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.tokens.ListAccessDenied(ctx, &sundialv1.ListAccessDeniedRequest{PageSize: int32(o.pageSize), PageToken: o.pageToken})
	if err != nil {
		return err
	}
	if r.output == "json" {
		return r.printJSON(resp)
	}
	tw := tabwriter.NewWriter(r.io.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tCODE\tMETHOD\tSOURCE\tACTOR\tTOKEN\tMORE")
	for _, e := range resp.GetEntries() {
		token := e.GetTokenId()
		if token == "" && e.GetFingerprint() != "" {
			token = "fp:" + e.GetFingerprint()
		}
		more := "-"
		if e.GetSuppressed() > 0 {
			more = fmt.Sprintf("+%d", e.GetSuppressed())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", instant(e.GetTime()), e.GetCode(), e.GetMethod(), orDash(e.GetSource()),
			orDash(e.GetActor()), orDash(token), more)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if resp.GetNextPageToken() != "" {
		fmt.Fprintf(r.io.Stderr, "more: --page-token %s\n", resp.GetNextPageToken())
	}
	return nil
}
