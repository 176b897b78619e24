// Package chromium starts the headless Chromium the browser tests drive
// (the console's, in services/api, and the end-to-end one): Debian's
// package, found by deploy/local/chromium.sh, run by chromedp with the
// options every such test needs.
package chromium

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"
)

// Start runs the Chromium at bin for the test and returns the context its
// steps run in; the browser ends with the test. It runs headless, without
// the sandbox (CI runs as root), 1280×900, with its profile and its own
// temporary files (org.chromium.Chromium.*) in the test's directories,
// not left in /tmp. extra adds options (a trusted certificate, say). The
// first step (about:blank) starts the browser; each later step should
// carry its own timeout.
func Start(t testing.TB, bin string, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", "new"),
		chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Env("TMPDIR="+t.TempDir()),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(opts, extra...)...)
	ctx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	// The first call starts the browser and must not carry a timeout (it
	// would end the browser with it).
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}
