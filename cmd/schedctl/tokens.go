package main

// The token commands: the api's bearer tokens (TokenService). A token is
// printed once, by create.

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// tokenRoles are --role's values, by the API's role.
var tokenRoles = map[string]sundialv1.Role{
	"admin":     sundialv1.Role_ROLE_TENANT_ADMIN,
	"read-only": sundialv1.Role_ROLE_TENANT_READ_ONLY,
	"operator":  sundialv1.Role_ROLE_PLATFORM_OPERATOR,
}

func roleName(r sundialv1.Role) string {
	for name, v := range tokenRoles {
		if v == r {
			return name
		}
	}
	return r.String()
}

type createTokenOpts struct {
	role string
	ttl  time.Duration
}

func (o *createTokenOpts) register(fs *flag.FlagSet) {
	fs.StringVar(&o.role, "role", "read-only", "what the token may do: admin (everything in your tenant), read-only (reads only) or operator (platform operators: reads of every tenant, dead-letter re-drive)")
	fs.DurationVar(&o.ttl, "ttl", 0, "how long the token is valid, e.g. 720h (at least 1m, at most 87600h); 0: no expiry")
}

func runTokenCreate(ctx context.Context, r *remote, o *createTokenOpts, args []string) error {
	if len(args) != 1 {
		return usagef("takes the token's NAME, got %d arguments", len(args))
	}
	role, ok := tokenRoles[o.role]
	if !ok {
		return usagef("--role must be admin, read-only or operator, got %q", o.role)
	}
	if o.ttl < 0 {
		return usagef("--ttl must not be negative, got %s", o.ttl)
	}
	req := &sundialv1.CreateTokenRequest{Name: args[0], Role: role}
	if o.ttl > 0 {
		req.Ttl = durationpb.New(o.ttl)
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.tokens.CreateToken(ctx, req)
	if err != nil {
		return err
	}
	if r.output == "json" {
		return r.printJSON(resp)
	}
	tw := tabwriter.NewWriter(r.io.Stdout, 0, 4, 2, ' ', 0)
	t := resp.GetToken()
	fmt.Fprintf(tw, "id:\t%s\n", t.GetId())
	fmt.Fprintf(tw, "token:\t%s\n", resp.GetSecret())
	fmt.Fprintf(tw, "tenant:\t%s\n", t.GetTenant())
	fmt.Fprintf(tw, "name:\t%s\n", t.GetName())
	fmt.Fprintf(tw, "role:\t%s\n", roleName(t.GetRole()))
	fmt.Fprintf(tw, "expires:\t%s\n", expiry(t))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(r.io.Stderr, "Store the token now: it is not shown again (the api keeps only a hash). Use it as SUNDIAL_TOKEN or --token.")
	return nil
}

func expiry(t *sundialv1.Token) string {
	if t.GetExpireTime() == nil {
		return "never"
	}
	return instant(t.GetExpireTime())
}

type listTokenOpts struct{ all bool }

func (o *listTokenOpts) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.all, "all", false, "also list revoked and expired tokens")
}

func runTokenList(ctx context.Context, r *remote, o *listTokenOpts, args []string) error {
	if len(args) != 0 {
		return usagef("takes no arguments, got %d", len(args))
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.tokens.ListTokens(ctx, &sundialv1.ListTokensRequest{IncludeInactive: o.all})
	if err != nil {
		return err
	}
	if r.output == "json" {
		return r.printJSON(resp)
	}
	now := r.io.now()
	tw := tabwriter.NewWriter(r.io.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tROLE\tSTATE\tCREATED\tCREATED_BY\tEXPIRES\tLAST_USED")
	for _, t := range resp.GetTokens() {
		state := "active"
		switch {
		case t.GetRevokeTime() != nil:
			state = "revoked by " + t.GetRevokedBy()
		case t.GetExpireTime() != nil && !now.Before(t.GetExpireTime().AsTime()):
			state = "expired"
		}
		used := "-"
		if t.GetLastUseTime() != nil {
			used = instant(t.GetLastUseTime())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.GetId(), t.GetName(), roleName(t.GetRole()), state,
			instant(t.GetCreateTime()), orDash(t.GetCreatedBy()), expiry(t), used)
	}
	return tw.Flush()
}

func runTokenRevoke(ctx context.Context, r *remote, _ *noOpts, args []string) error {
	if len(args) != 1 {
		return usagef("takes the token's ID (schedctl token list), got %d arguments", len(args))
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.tokens.RevokeToken(ctx, &sundialv1.RevokeTokenRequest{Id: args[0]})
	if err != nil {
		return err
	}
	if r.output == "json" {
		return r.printJSON(resp)
	}
	t := resp.GetToken()
	fmt.Fprintf(r.io.Stdout, "revoked %s (%s) at %s by %s\n", t.GetId(), t.GetName(), instant(t.GetRevokeTime()), t.GetRevokedBy())
	return nil
}

type tokenAuditOpts struct {
	pageSize  int
	pageToken string
}

func (o *tokenAuditOpts) register(fs *flag.FlagSet) {
	fs.IntVar(&o.pageSize, "page-size", 100, "entries per page (at most 1000)")
	fs.StringVar(&o.pageToken, "page-token", "", "continue from a previous page")
}
