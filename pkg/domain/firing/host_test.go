package firing_test

import (
	"testing"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func TestTargetHost(t *testing.T) {
	web := func(u string) *sundialv1.Target {
		return &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: u}}}
	}
	for _, c := range []struct {
		name   string
		target *sundialv1.Target
		want   string
	}{
		{"host and port", web("https://hooks.example:8443/run?x=1"), "hooks.example:8443"},
		{"no port", web("http://hooks.example/run"), "hooks.example"},
		{"case folded", web("https://API.Example.COM/Run"), "api.example.com"},
		{"ipv6", web("http://[::1]:8080/"), "[::1]:8080"},
		{"unparsable", web("http://[::1/"), ""},
		{"no host", web("/relative"), ""},
		{"kafka keeps the topic's case", &sundialv1.Target{Kind: &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: "Orders.v1"}}}, "kafka Orders.v1"},
		{"no target", nil, ""},
		{"empty target", &sundialv1.Target{}, ""},
	} {
		if got := firing.TargetHost(c.target); got != c.want {
			t.Errorf("%s: TargetHost = %q, want %q", c.name, got, c.want)
		}
	}
}
