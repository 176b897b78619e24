package evict

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaGroup is a consumer group on the brokers, read and changed through
// a client of its own (not the consumer's, so these calls never wait
// behind a fetch).
type KafkaGroup struct {
	group string
	cl    *kgo.Client
	adm   *kadm.Client
}

// DialGroup connects a client to brokers for group; opts are the
// consumer's TLS and SASL options. Close it when done.
func DialGroup(group string, brokers []string, clientID string, opts ...kgo.Opt) (*KafkaGroup, error) {
	cl, err := kgo.NewClient(slices.Concat(opts, []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ClientID(clientID)})...)
	if err != nil {
		return nil, fmt.Errorf("evict: kafka client: %w", err)
	}
	return &KafkaGroup{group: group, cl: cl, adm: kadm.NewClient(cl)}, nil
}

// Close closes the client.
func (g *KafkaGroup) Close() { g.cl.Close() }

// Members lists the group's static members; a member's client id is its
// worker id.
func (g *KafkaGroup) Members(ctx context.Context) ([]Member, error) {
	described, err := g.adm.DescribeGroups(ctx, g.group)
	if err != nil {
		return nil, fmt.Errorf("describe group %s: %w", g.group, err)
	}
	d, ok := described[g.group]
	if !ok {
		return nil, fmt.Errorf("describe group %s: no answer for it", g.group)
	}
	if d.Err != nil {
		return nil, fmt.Errorf("describe group %s: %w", g.group, d.Err)
	}
	var out []Member
	for _, m := range d.Members {
		if m.InstanceID != nil && *m.InstanceID != "" {
			out = append(out, Member{InstanceID: *m.InstanceID, WorkerID: m.ClientID})
		}
	}
	return out, nil
}

// Remove takes the static members with these instance ids out of the
// group; one already gone is not an error.
func (g *KafkaGroup) Remove(ctx context.Context, instanceIDs []string) error {
	res, err := g.adm.LeaveGroup(ctx, kadm.LeaveGroup(g.group).InstanceIDs(instanceIDs...).Reason("liveness key lapsed"))
	if err != nil {
		return fmt.Errorf("leave group %s for %v: %w", g.group, instanceIDs, err)
	}
	var errs []error
	res.EachError(func(r kadm.LeaveGroupResponse) {
		if !errors.Is(r.Err, kerr.UnknownMemberID) {
			errs = append(errs, fmt.Errorf("remove %s from group %s: %w", r.InstanceID, g.group, r.Err))
		}
	})
	return errors.Join(errs...)
}
