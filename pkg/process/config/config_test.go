package config

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestPrecedenceFlagOverEnvOverDefault(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	a := fs.String("postgres-dsn", "default-dsn", "")
	b := fs.Duration("tick", time.Second, "")
	c := fs.String("grpc-addr", "default-addr", "")
	env := map[string]string{
		"SUNDIAL_POSTGRES_DSN": "env-dsn",
		"SUNDIAL_TICK":         "250ms",
		"SUNDIAL_GRPC_ADDR":    "env-addr",
	}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := Load(fs, []string{"--grpc-addr", "flag-addr"}, getenv); err != nil {
		t.Fatal(err)
	}
	if *a != "env-dsn" || *b != 250*time.Millisecond || *c != "flag-addr" {
		t.Fatalf("got dsn=%q tick=%s addr=%q", *a, *b, *c)
	}
}

func TestBadEnvValueNamesTheVariable(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Duration("tick", time.Second, "")
	err := Load(fs, nil, func(k string) (string, bool) {
		if k == "SUNDIAL_TICK" {
			return "soon", true
		}
		return "", false
	})
	if err == nil || !strings.Contains(err.Error(), "SUNDIAL_TICK") {
		t.Fatalf("err = %v, want one naming SUNDIAL_TICK", err)
	}
}

func TestProblems(t *testing.T) {
	var p Problems
	if p.Err() != nil {
		t.Fatal("empty problems is an error")
	}
	p.Addf("window", "must be positive, got %s", "-1s")
	p.Addf("batch-size", "must be at least 1")
	err := p.Err()
	if err == nil || !strings.Contains(err.Error(), "window: must be positive, got -1s") || !strings.Contains(err.Error(), "batch-size") {
		t.Fatalf("err = %v", err)
	}
}

func TestEnvName(t *testing.T) {
	if got := EnvName("kafka-brokers"); got != "SUNDIAL_KAFKA_BROKERS" {
		t.Fatalf("EnvName = %q", got)
	}
}
