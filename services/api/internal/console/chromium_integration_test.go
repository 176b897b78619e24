//go:build integration

package console_test

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"
)

// startChromium starts headless Chromium (bin: make test-browser's
// SUNDIAL_CHROMIUM) for one test and returns the context its steps run
// in. Its profile and its own temporary files (org.chromium.Chromium.*,
// which it makes in $TMPDIR) are in the test's directories, so nothing is
// left in /tmp, and the browser is stopped when the test ends, before
// those directories are removed. extra adds options.
func startChromium(t *testing.T, bin string, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", "new"),
		chromedp.NoSandbox, // as root in CI
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
	// The first call starts the browser and must not carry a timeout
	// (it would end the browser); each step has its own.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}
