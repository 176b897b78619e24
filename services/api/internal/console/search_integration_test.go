//go:build integration

package console_test

import (
	"context"
	"html"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
	"github.com/sundialhq/sundial/testkit/harness"
)

// A name search of one or two characters pages through windows of
// server.ShortNameScan jobs: the three matches among 25,000 jobs come on
// the pages whose windows hold them, each with a next page until the
// last, and the page says why it may show few.
func TestIntegrationConsoleShortNameSearch(t *testing.T) {
	api := startConsole(t, false)
	ctx := context.Background()
	const n = 25_000
	matches := map[int]bool{3: true, 15_000: true, 24_000: true}
	if _, err := harness.CopyJobs(ctx, api.Pool, "acme", n, harness.CopyOptions{Streams: 1}, func(i int) *sundialv1.Job {
		name := "job-" + strconv.Itoa(i)
		if matches[i] {
			name = "zq-" + strconv.Itoa(i)
		}
		return &sundialv1.Job{Name: name, Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "@daily"}},
			Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://hooks.example/job"}}}}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Pool.Exec(ctx, `ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, api)
	b.signIn(apitest.TokenAcme)
	next := regexp.MustCompile(`href="(/jobs\?[^"]*page=[^"]*)" id="next-page"`)
	var found []string
	path, pages := "/jobs?name=ZQ", 0
	for path != "" {
		pages++
		code, body, _ := b.do("GET", path, nil)
		if code != http.StatusOK {
			t.Fatalf("%s: %d", path, code)
		}
		found = append(found, regexp.MustCompile(`>(zq-\d+)</a>`).FindAllString(body, -1)...)
		path = ""
		if m := next.FindStringSubmatch(body); m != nil {
			path = html.UnescapeString(m[1])
			if !strings.Contains(body, `id="short-search"`) {
				t.Errorf("page %d has a next page but no word on the short search", pages)
			}
		}
	}
	if want := []string{">zq-3</a>", ">zq-15000</a>", ">zq-24000</a>"}; strings.Join(found, " ") != strings.Join(want, " ") || pages != 3 {
		t.Errorf("found %v in %d pages, want %v in 3 (windows of 10,000)", found, pages, want)
	}
}
