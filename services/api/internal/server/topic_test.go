package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// topics is a cluster holding the listed topics; down makes every check
// fail as an unreachable cluster would.
type topics struct {
	have  map[string]bool
	down  bool
	asked []string
}

func (f *topics) TopicExists(_ context.Context, topic string) (bool, error) {
	f.asked = append(f.asked, topic)
	if f.down {
		return false, errors.New("no broker answers")
	}
	return f.have[topic], nil
}

// errReached is what reachedStore answers: the request got past validation.
var errReached = errors.New("reached the store")

type reachedStore struct{ Store }

func (reachedStore) Create(context.Context, string, store.CreateOptions, store.BuildFunc) (*sundialv1.Job, bool, error) {
	return nil, false, errReached
}

func (reachedStore) Mutate(context.Context, string, string, store.Change, store.MutateFunc) (store.Mutated, error) {
	return store.Mutated{}, errReached
}

func kafkaJob(topic string) *sundialv1.Job {
	j := validJob()
	j.Target = &sundialv1.Target{Kind: &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: topic}}}
	return j
}

func topicService(t *testing.T, st Store, tc TopicChecker) *JobService {
	t.Helper()
	s, err := NewJobService(Config{Store: st, Versions: noVersions{}, Topics: tc,
		Clock: clock.NewFake(time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A Kafka target whose topic does not exist is refused when the job is
// made: accepted, every firing would be dead-lettered with
// UNKNOWN_TOPIC_OR_PARTITION.
func TestKafkaTargetTopicMustExist(t *testing.T) {
	tc := &topics{have: map[string]bool{"orders.tick": true}}

	s := topicService(t, untouchable{t: t}, tc)
	_, err := s.CreateJob(tenantCtx, &sundialv1.CreateJobRequest{Job: kafkaJob("orders.tikc")})
	if got := violations(t, err); !strings.Contains(got["target.kafka.topic"], `"orders.tikc" does not exist`) {
		t.Fatalf("create with a missing topic: violations %v", got)
	}
	upd := &sundialv1.UpdateJobRequest{Job: kafkaJob("orders.tikc"), UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"target"}}}
	upd.Job.Id = someID
	_, err = s.UpdateJob(tenantCtx, upd)
	if _, ok := violations(t, err)["target.kafka.topic"]; !ok {
		t.Fatalf("update to a missing topic: %v", err)
	}

	ok := topicService(t, reachedStore{}, tc)
	if _, err := ok.CreateJob(tenantCtx, &sundialv1.CreateJobRequest{Job: kafkaJob("orders.tick")}); !errors.Is(err, errReached) && status.Code(err) != codes.Internal {
		t.Fatalf("create with an existing topic: %v", err)
	}
	// An update that leaves the target alone asks nothing.
	tc.asked = nil
	upd = &sundialv1.UpdateJobRequest{Job: &sundialv1.Job{Id: someID, Name: "renamed"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"name"}}}
	if _, err := ok.UpdateJob(tenantCtx, upd); status.Code(err) == codes.InvalidArgument {
		t.Fatalf("rename: %v", err)
	}
	if len(tc.asked) != 0 {
		t.Fatalf("rename asked the cluster about %v", tc.asked)
	}
	// HTTP targets ask nothing either.
	if _, err := ok.CreateJob(tenantCtx, &sundialv1.CreateJobRequest{Job: validJob()}); status.Code(err) == codes.InvalidArgument || len(tc.asked) != 0 {
		t.Fatalf("http job: %v, asked %v", err, tc.asked)
	}
}

// A cluster that cannot be asked refuses nothing: the api keeps accepting
// jobs through a Kafka outage.
func TestKafkaTopicCheckPassesWhenTheClusterIsDown(t *testing.T) {
	s := topicService(t, reachedStore{}, &topics{down: true})
	_, err := s.CreateJob(tenantCtx, &sundialv1.CreateJobRequest{Job: kafkaJob("orders.tick")})
	if status.Code(err) == codes.InvalidArgument {
		t.Fatalf("create while Kafka is down: %v", err)
	}
}
