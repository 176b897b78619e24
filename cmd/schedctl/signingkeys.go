package main

// The signing-key commands: the tenant's webhook signing keys
// (SigningKeyService). A secret is printed once, by create and rotate.

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func runSigningKeyCreate(ctx context.Context, r *remote, _ *noOpts, args []string) error {
	if len(args) != 0 {
		return usagef("takes no arguments, got %d", len(args))
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.keys.CreateSigningKey(ctx, &sundialv1.CreateSigningKeyRequest{})
	if err != nil {
		return err
	}
	if r.output == "json" {
		return r.printJSON(resp)
	}
	return r.printNewKey(resp.GetKey(), resp.GetSecret(), nil)
}

type rotateKeyOpts struct {
	overlap time.Duration
}

func (o *rotateKeyOpts) register(fs *flag.FlagSet) {
	fs.DurationVar(&o.overlap, "overlap", 24*time.Hour, "how long the previous key stays valid (requests are signed with both meanwhile); 0 ends it at once, for a key that leaked; at most 720h")
}

func runSigningKeyRotate(ctx context.Context, r *remote, o *rotateKeyOpts, args []string) error {
	if len(args) != 0 {
		return usagef("takes no arguments, got %d", len(args))
	}
	if o.overlap < 0 {
		return usagef("--overlap must not be negative, got %s", o.overlap)
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.keys.RotateSigningKey(ctx, &sundialv1.RotateSigningKeyRequest{Overlap: durationpb.New(o.overlap)})
	if err != nil {
		return err
	}
	if r.output == "json" {
		return r.printJSON(resp)
	}
	return r.printNewKey(resp.GetKey(), resp.GetSecret(), resp.GetPrevious())
}

// printNewKey shows a new key and its secret, which the api never shows
// again, and says so on stderr (so a script reading stdout gets the table
// alone).
func (r *remote) printNewKey(k *sundialv1.SigningKey, secret string, prev *sundialv1.SigningKey) error {
	tw := tabwriter.NewWriter(r.io.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "key_id:\t%s\n", k.GetKeyId())
	fmt.Fprintf(tw, "secret:\t%s\n", secret)
	fmt.Fprintf(tw, "created:\t%s\n", instant(k.GetCreateTime()))
	if prev != nil {
		fmt.Fprintf(tw, "previous:\t%s, valid until %s\n", prev.GetKeyId(), instant(prev.GetExpireTime()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(r.io.Stderr, "Store the secret now: it is not shown again. Targets verify Sundial-Signature with it (docs/security.md).")
	return nil
}

func runSigningKeyList(ctx context.Context, r *remote, _ *noOpts, args []string) error {
	if len(args) != 0 {
		return usagef("takes no arguments, got %d", len(args))
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.keys.ListSigningKeys(ctx, &sundialv1.ListSigningKeysRequest{})
	if err != nil {
		return err
	}
	if r.output == "json" {
		return r.printJSON(resp)
	}
	tw := tabwriter.NewWriter(r.io.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY_ID\tSTATE\tCREATED\tEXPIRES\tCREATED_BY")
	for _, k := range resp.GetKeys() {
		state, expires := "current", "-"
		if !k.GetCurrent() {
			state, expires = "previous", instant(k.GetExpireTime())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.GetKeyId(), state, instant(k.GetCreateTime()), expires, orDash(k.GetCreatedBy()))
	}
	return tw.Flush()
}
