//go:build integration

package server

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/client"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// pkg/client passes expected versions through and recognises the api's
// conflict, against the real api.
func TestIntegrationClientExpectedVersion(t *testing.T) {
	h := newHarness(t, nil)
	c, err := client.New(h.conn.Target(), tokenAcme, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	job, err := c.CreateJob(h.ctx, everyMinute("client"), "")
	if err != nil {
		t.Fatal(err)
	}
	edit := &sundialv1.Job{Id: job.GetId(), Name: "edited"}
	upd, err := c.UpdateJobAt(h.ctx, edit, job.GetVersion(), "name")
	if err != nil || upd.GetVersion() != 2 {
		t.Fatalf("update at the version read: %v %v", upd, err)
	}
	if _, err := c.UpdateJobAt(h.ctx, edit, job.GetVersion(), "name"); !client.IsVersionConflict(err) {
		t.Fatalf("update at a stale version: %v, want a version conflict", err)
	}
	if _, err := c.PauseJobAt(h.ctx, job.GetId(), 1); !client.IsVersionConflict(err) {
		t.Fatalf("pause at a stale version: %v", err)
	}
	if _, err := c.DeleteJobAt(h.ctx, job.GetId(), 2); err != nil {
		t.Fatalf("delete at the current version: %v", err)
	}
	if _, err := c.ResumeJobAt(h.ctx, job.GetId(), 2); !client.IsVersionConflict(err) {
		t.Fatalf("resume at a stale version: %v", err)
	}
	// Another refusal is not a version conflict.
	if _, err := c.PauseJob(h.ctx, job.GetId()); status.Code(err) != codes.FailedPrecondition || client.IsVersionConflict(err) {
		t.Fatalf("pause a deleted job: %v", err)
	}
}
