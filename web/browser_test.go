package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/web"
)

// These tests drive a real headless Chromium (github.com/chromedp/chromedp)
// against the real server: api.New with web.Handler over a bbolt file in
// t.TempDir(), on 127.0.0.1. Without a browser on the PATH they skip. Set
// FENCEQ_SCREENSHOT_DIR to keep copies of the screenshots, which are
// otherwise written to the test's temporary directory.

// findBrowser returns the path of Chromium or Chrome, or "".
func findBrowser() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// newBrowser starts headless Chromium with a fresh profile and returns a
// tab's context. The browser is closed (and waited for) on cleanup.
func newBrowser(t *testing.T, width, height int) context.Context {
	t.Helper()
	path := findBrowser()
	if path == "" {
		t.Skip("browser test skipped: no chromium, chromium-browser or google-chrome on the PATH " +
			"(on Debian: apt-get install chromium; .ci/run installs it)")
	}
	profile := t.TempDir()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(width, height),
		// This machine has no outside network: keep Chromium from trying.
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("use-mock-keychain", true),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc() // waits for the browser to exit, before the profile is removed
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx
}

// pageServer is the real server with the status page.
type pageServer struct {
	t     *testing.T
	url   string
	store *bolt.Store
	// zombieJob is the job the seeded stale heartbeat was made against.
	zombieJob uint64
}

func newPageServer(t *testing.T, principals *api.Principals) *pageServer {
	t.Helper()
	store, err := bolt.Open(filepath.Join(t.TempDir(), "fenceq.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.New(store, api.Config{Index: web.Handler(), Principals: principals,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(func() {
		srv.Close()
		if err := store.Check(); err != nil {
			t.Errorf("store.Check() after the test = %v", err)
		}
		store.Close()
	})
	return &pageServer{t: t, url: srv.URL, store: store}
}

// call sends a JSON request to the API with an optional bearer token and
// decodes a JSON reply into out (when not nil).
func (ps *pageServer) call(token, method, path, body string, want int, out any) {
	ps.t.Helper()
	req, err := http.NewRequest(method, ps.url+path, strings.NewReader(body))
	if err != nil {
		ps.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		ps.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		ps.t.Fatalf("%s %s = %d %s, want %d", method, path, res.StatusCode, raw, want)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			ps.t.Fatalf("%s %s: %s: %v", method, path, raw, err)
		}
	}
}

type jobJSON struct {
	ID           uint64 `json:"id"`
	State        string `json:"state"`
	FencingToken uint64 `json:"fencing_token"`
}

// seed makes the workload the page shows: emails 2 available + 1 claimed,
// reports 1 scheduled, images 1 dead, flaky 1 waiting for a retry, a named
// lease, and a stale heartbeat (a zombie). It returns the dead job's id.
func (ps *pageServer) seed(token string) uint64 {
	ps.t.Helper()
	for i := 0; i < 3; i++ {
		ps.call(token, "POST", "/v1/jobs", `{"queue":"emails","kind":"send","payload":{"to":"ada@example.com"}}`, 201, nil)
	}
	ps.call(token, "POST", "/v1/jobs", `{"queue":"reports","delay_ms":3600000}`, 201, nil)
	var dead jobJSON
	ps.call(token, "POST", "/v1/jobs", `{"queue":"images","max_attempts":1,"payload":{"img":"cat.png"}}`, 201, &dead)
	var claimed jobJSON
	ps.call(token, "POST", "/v1/claim", `{"worker":"w1","queues":["emails"],"lease_ms":600000}`, 200, &claimed)
	ps.call(token, "POST", "/v1/claim", `{"worker":"w2","queues":["images"]}`, 200, nil)
	ps.call(token, "POST", fmt.Sprintf("/v1/jobs/%d/fail", dead.ID),
		`{"worker":"w2","error":"decoder crashed: unexpected EOF","final":true}`, 200, nil)
	ps.call(token, "POST", fmt.Sprintf("/v1/jobs/%d/heartbeat", claimed.ID),
		fmt.Sprintf(`{"worker":"w1","fencing_token":%d}`, claimed.FencingToken+4), 404, nil)
	ps.zombieJob = claimed.ID
	var flaky jobJSON
	ps.call(token, "POST", "/v1/jobs", `{"queue":"flaky"}`, 201, &flaky)
	ps.call(token, "POST", "/v1/claim", `{"worker":"w3","queues":["flaky"]}`, 200, nil)
	ps.call(token, "POST", fmt.Sprintf("/v1/jobs/%d/fail", flaky.ID),
		`{"worker":"w3","error":"smtp timeout","retry_delay_ms":600000}`, 200, nil)
	ps.call(token, "POST", "/v1/leases/%2Fdata%2Freport.csv/acquire", `{"holder":"etl-1","ttl_ms":600000}`, 200, nil)
	ps.call(token, "PUT", "/v1/schedules/nightly-report", `{"cron":"30 2 * * *","timezone":"Europe/Berlin","job":{"queue":"reports"}}`, 201, nil)
	ps.call(token, "PUT", "/v1/schedules/held", `{"every_ms":60000,"job":{"queue":"reports"}}`, 201, nil)
	ps.call(token, "POST", "/v1/schedules/held/pause", ``, 200, nil)
	return dead.ID
}

// waitJS waits until the JavaScript expression is true. On a timeout it
// fails the test with the page's visible text.
func waitJS(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		t.Fatalf("waiting for %s (%s): %v\npage text:\n%s", what, expr, err, text)
	}
}

func evalJS[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// cell is the expression for the text of a count in the queue table.
func cell(queue, state string) string {
	return fmt.Sprintf(`(document.querySelector('#queues td[data-queue=%q][data-state=%q]') || {}).textContent`, queue, state)
}

// screenshot writes a full-page PNG to dir and, when FENCEQ_SCREENSHOT_DIR
// is set, a copy there.
func screenshot(t *testing.T, ctx context.Context, dir, name string) string {
	t.Helper()
	// From the top, so that the sticky header is where a person sees it.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](`window.scrollTo(0, 0)`)); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot %s is not a PNG (%d bytes)", name, len(png))
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	if keep := os.Getenv("FENCEQ_SCREENSHOT_DIR"); keep != "" {
		if err := os.MkdirAll(keep, 0o755); err == nil {
			os.WriteFile(filepath.Join(keep, name), png, 0o644)
		}
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
	return path
}

// accessible checks that every visible button has a name and every table
// is named by an existing element.
const accessible = `(() => {
  const unnamed = [...document.querySelectorAll('button')].filter((b) => !b.closest('[hidden]') && !b.hidden &&
    !((b.getAttribute('aria-label') || b.textContent).trim()));
  const tables = [...document.querySelectorAll('table')].filter((t) => {
    const id = t.getAttribute('aria-labelledby');
    return !(id && document.getElementById(id) && document.getElementById(id).textContent.trim());
  });
  return unnamed.length === 0 && tables.length === 0;
})()`

func TestStatusPage_InABrowser(t *testing.T) {
	ctx := newBrowser(t, 1280, 1000)
	ps := newPageServer(t, nil)
	deadID := ps.seed("")
	shots := t.TempDir()

	if err := chromedp.Do(ctx, chromedp.Navigate(ps.url+"/")); err != nil {
		t.Fatal(err)
	}
	// The seeded workload's counts.
	for _, c := range []struct{ queue, state, want string }{
		{"emails", "available", "2"}, {"emails", "claimed", "1"}, {"emails", "total", "3"},
		{"reports", "scheduled", "1"}, {"images", "dead", "1"},
	} {
		waitJS(t, ctx, fmt.Sprintf("%s %s = %s", c.queue, c.state, c.want), cell(c.queue, c.state)+` === "`+c.want+`"`)
	}
	// The other parts of the page.
	waitJS(t, ctx, "the claimed job with its holder and token",
		`[...document.querySelectorAll('#claimed tbody td')].some((td) => td.textContent === 'local|w1')`)
	waitJS(t, ctx, "the dead job's error",
		`document.querySelector('#dead tbody').textContent.includes('decoder crashed: unexpected EOF')`)
	waitJS(t, ctx, "the zombie heartbeat", `document.querySelector('#zombies tbody').textContent.includes('heartbeat')`)
	waitJS(t, ctx, "the named lease", `document.querySelector('#leases tbody').textContent.includes('/data/report.csv')`)
	waitJS(t, ctx, "the audit chain verifying", `document.querySelector('#audit').textContent.includes('Verifies')`)
	waitJS(t, ctx, "the schedules with their timing and the paused one marked",
		`document.querySelector('#schedules tr[data-schedule="nightly-report"]').textContent.includes('30 2 * * * (Europe/Berlin)') && `+
			`document.querySelector('#schedules tr[data-schedule="held"]').textContent.includes('paused')`)
	waitJS(t, ctx, "the throughput chart's lines", `document.querySelectorAll('#chart polyline').length === 3`)
	waitJS(t, ctx, "the chart's description", `document.querySelector('#chart-desc').textContent.includes('3 claims')`)
	if !evalJS[bool](t, ctx, accessible) {
		t.Errorf("a visible button has no accessible name, or a table is not labelled")
	}
	checkOperatorParts(t, ctx, "at 1280 px")

	// A job enqueued through the API appears without a reload.
	evalJS[any](t, ctx, `window.__sameDocument = 42`)
	ps.call("", "POST", "/v1/jobs", `{"queue":"emails"}`, 201, nil)
	waitJS(t, ctx, "emails available = 3 after an enqueue", cell("emails", "available")+` === "3"`)
	if v := evalJS[float64](t, ctx, `window.__sameDocument || 0`); v != 42 {
		t.Fatalf("the page was reloaded to show the new job (marker = %v)", v)
	}

	// Retry moves the dead job to available.
	retry := fmt.Sprintf(`button[aria-label="Retry job %d"]`, deadID)
	waitJS(t, ctx, "the Retry button", fmt.Sprintf(`!!document.querySelector('%s')`, retry))
	screenshot(t, ctx, shots, "status-before-retry.png")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(retry))); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		job, err := ps.store.GetJob(context.Background(), deadID)
		if err != nil {
			t.Fatal(err)
		}
		if job.State == db.StateAvailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d is %s 15 s after the Retry click, want available", deadID, job.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitJS(t, ctx, "the dead count back to 0", cell("images", "dead")+` === "0" && `+cell("images", "available")+` === "1"`)
	waitJS(t, ctx, "the notice of the retry", fmt.Sprintf(`document.querySelector('#notice').textContent.includes('Job %d is available')`, deadID))
	screenshot(t, ctx, shots, "status.png")

	// Pause: the button pauses emails in the store, the row says so and a
	// claim gets nothing; Resume lets claims take its jobs again.
	pausedInStore := func(want bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			ps, err := ps.store.PausedQueues(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := len(ps) == 1 && ps[0].Queue == "emails"; got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("paused queues 15 s after the click = %+v, want emails paused = %v", ps, want)
			}
		}
	}
	pause, resume := `button[aria-label="Pause queue emails"]`, `button[aria-label="Resume queue emails"]`
	waitJS(t, ctx, "the Pause button of emails", fmt.Sprintf(`!!document.querySelector('%s')`, pause))
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(pause))); err != nil {
		t.Fatal(err)
	}
	pausedInStore(true)
	waitJS(t, ctx, "emails shown paused with a Resume button", fmt.Sprintf(
		`!!document.querySelector('#queues [data-paused="emails"]') && !!document.querySelector('%s') && !document.querySelector('#queues [data-paused="images"]')`, resume))
	waitJS(t, ctx, "the notice of the pause", `document.querySelector('#notice').textContent.includes('Queue emails is paused')`)
	ps.call("", "POST", "/v1/claim", `{"worker":"w9","queues":["emails"]}`, 204, nil)
	if !evalJS[bool](t, ctx, accessible) {
		t.Errorf("with a queue paused, a visible button has no accessible name, or a table is not labelled")
	}
	screenshot(t, ctx, shots, "status-paused.png")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(resume))); err != nil {
		t.Fatal(err)
	}
	pausedInStore(false)
	waitJS(t, ctx, "emails running with a Pause button", fmt.Sprintf(
		`!document.querySelector('#queues [data-paused="emails"]') && !!document.querySelector('%s')`, pause))
	ps.call("", "POST", "/v1/claim", `{"worker":"w9","queues":["emails"]}`, 200, nil)
	page, err := ps.store.ListAuditBySubject(context.Background(), db.AuditSubjectRequest{Subject: db.QueueSubject("emails")})
	if err != nil || len(page.Records) != 2 || page.Records[0].Action != "resume" || page.Records[1].Action != "pause" {
		t.Errorf("audit records of queue emails = %+v, %v; want the pause and the resume", page.Records, err)
	}

	// The job page: fields, error, history with the retry.
	if err := chromedp.Do(ctx, chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", ps.url, deadID))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the job's history with its retry",
		`['retry','dead','claim','enqueue'].every((a) => document.querySelector('#history tr[data-action="'+a+'"]'))`)
	waitJS(t, ctx, "the job's state and error", `document.querySelector('#job-state').textContent === 'available' && `+
		`document.querySelector('#job-errors').textContent.includes('decoder crashed')`)
	waitJS(t, ctx, "the payload", `document.querySelector('#job-payload').textContent.includes('cat.png')`)
	waitJS(t, ctx, "no refused calls against the dead job", `document.querySelector('#n-refusals').textContent === '(0)'`)
	if n := evalJS[float64](t, ctx, `document.querySelectorAll('#job-actions button[data-action="retry"]').length`); n != 0 {
		t.Errorf("an available job's page offers Retry")
	}
	screenshot(t, ctx, shots, "job.png")
	// The job a stale heartbeat was made against lists it on its own page.
	if err := chromedp.Do(ctx, chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", ps.url, ps.zombieJob))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the job's refused heartbeat", `document.querySelector('#n-refusals').textContent === '(1)' && `+
		`!!document.querySelector('#job-refusals tr[data-operation="heartbeat"]') && `+
		`document.querySelector('#job-refusals').textContent.includes('local|w1')`)

	// A phone: the page fits the width, every row a card; a paused
	// queue's Resume button keeps its label on one line.
	ps.call("", "POST", "/v1/queues/emails/pause", "", 200, nil)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(ps.url+"/")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the counts on a phone", cell("emails", "available")+` === "2"`)
	checkOperatorParts(t, ctx, "at 390 px")
	waitJS(t, ctx, "the Resume button on a phone", fmt.Sprintf(`!!document.querySelector('%s')`, resume))
	if lines := evalJS[float64](t, ctx, fmt.Sprintf(`(() => {
	  const r = document.createRange(); r.selectNodeContents(document.querySelector('%s'));
	  return new Set([...r.getClientRects()].map((c) => Math.round(c.top))).size; })()`, resume)); lines != 1 {
		t.Errorf("on a 390 px wide phone the Resume button's label takes %v lines, want 1", lines)
	}
	if w := evalJS[float64](t, ctx, `document.documentElement.scrollWidth - window.innerWidth`); w > 0 {
		t.Errorf("on a 390 px wide phone the page is %v px wider than the screen", w)
	}
	screenshot(t, ctx, shots, "status-phone.png")
}

// checkOperatorParts checks the parts of the status page an operator acts
// on (issue 31), at the browser's current width: dead jobs and refused
// stale calls come before the queues; each queue shows how long its
// oldest job has waited; the job waiting for a retry is listed apart, with
// its error and next attempt; the workers heard from are listed; the
// throughput chart's ticks are whole numbers.
func checkOperatorParts(t *testing.T, ctx context.Context, where string) {
	t.Helper()
	waitJS(t, ctx, "the workers "+where, `['local|w1', 'local|w2', 'local|w3'].every((w) => `+
		`!!document.querySelector('#workers tr[data-worker="' + w + '"]'))`)
	waitJS(t, ctx, "the job waiting for a retry "+where, `(() => {
	  const rows = document.querySelectorAll('#retrying tbody tr[data-job]');
	  return rows.length === 1 && rows[0].textContent.includes('smtp timeout') && rows[0].textContent.includes('flaky') &&
	    /in 9m|in 10m/.test(rows[0].querySelector('time').textContent); })()`)
	if evalJS[bool](t, ctx, `document.querySelector('#scheduled tbody').textContent.includes('flaky')`) {
		t.Errorf("%s: the job waiting for a retry is also listed as scheduled", where)
	}
	waitJS(t, ctx, "the queue latencies "+where, cell("emails", "latency")+` !== undefined && /^\d+s$/.test(`+cell("emails", "latency")+`) && `+
		cell("reports", "latency")+` === "—"`)
	order := evalJS[[]string](t, ctx, `[...document.querySelectorAll('main > section:not([hidden])')]
	  .sort((a, b) => a.getBoundingClientRect().top - b.getBoundingClientRect().top || a.getBoundingClientRect().left - b.getBoundingClientRect().left)
	  .map((s) => s.id)`)
	pos := map[string]int{}
	for i, id := range order {
		pos[id] = i
	}
	if !(pos["sec-dead"] < pos["sec-queues"] && pos["sec-zombies"] < pos["sec-queues"]) {
		t.Errorf("%s: sections from the top = %v, want dead jobs and refused stale calls before the queues", where, order)
	}
	ticks := evalJS[[]string](t, ctx, `[...document.querySelectorAll('#chart .grid text')].map((t) => t.textContent).filter((t) => /^[0-9.,]+$/.test(t))`)
	if len(ticks) != 3 {
		t.Errorf("%s: chart ticks = %q, want 3", where, ticks)
	}
	for _, tick := range ticks {
		if strings.ContainsAny(tick, ".,") {
			t.Errorf("%s: chart ticks = %q, want whole numbers for whole counts", where, ticks)
			break
		}
	}
}

// TestStatusPage_AsksForATokenOnceAndShowsButtonsByRole: with principals,
// the page asks for a token, keeps it for the tab (a reload does not ask
// again), and shows Retry and Cancel only to a role that may use them.
func TestStatusPage_AsksForATokenOnceAndShowsButtonsByRole(t *testing.T) {
	ctx := newBrowser(t, 1280, 1000)
	prodToken, prodLine, err := api.NewToken("prod", []api.Role{api.RoleProducer})
	if err != nil {
		t.Fatal(err)
	}
	bossToken, bossLine, err := api.NewToken("boss", []api.Role{api.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := api.ParsePrincipals(strings.NewReader(prodLine + "\n" + bossLine + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv := newPageServer(t, ps)
	deadID := srv.seed(bossToken)
	retry := fmt.Sprintf(`button[aria-label="Retry job %d"]`, deadID)

	if err := chromedp.Do(ctx, chromedp.Navigate(srv.url+"/")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the token dialog", `document.querySelector('#token-dialog').open`)
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#token-input"), prodToken),
		chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)),
	); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the counts for a producer", cell("images", "dead")+` === "1"`)
	waitJS(t, ctx, "the dead job without buttons for a producer",
		fmt.Sprintf(`!!document.querySelector('#dead tr[data-job="%d"]') && document.querySelectorAll('button[data-action], button[data-queue-action]').length === 0`, deadID))
	if evalJS[bool](t, ctx, `!document.querySelector('#sec-leases').hidden || !document.querySelector('#sec-audit').hidden`) {
		t.Errorf("a producer sees the leases or the audit part")
	}
	waitJS(t, ctx, "the schedules for a producer", `!document.querySelector('#sec-schedules').hidden && !!document.querySelector('#schedules tr[data-schedule="held"]')`)
	if got := evalJS[string](t, ctx, `sessionStorage.getItem('fenceq.token')`); got != prodToken {
		t.Errorf("sessionStorage token = %q, want the producer's", got)
	}

	// A reload keeps the token: no dialog, data at once.
	if err := chromedp.Do(ctx, chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the counts after a reload", cell("emails", "available")+` === "2"`)
	if evalJS[bool](t, ctx, `document.querySelector('#token-dialog').open`) {
		t.Errorf("the page asked for the token again after a reload")
	}

	// Sign out, sign in as an admin: the buttons appear and work.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#signout"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "signed out", `sessionStorage.getItem('fenceq.token') === null && document.querySelector('#signout').textContent === 'Sign in'`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#signout"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the token dialog again", `document.querySelector('#token-dialog').open`)
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#token-input"), bossToken),
		chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)),
	); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the Retry button for an admin", fmt.Sprintf(`!!document.querySelector('%s')`, retry))
	waitJS(t, ctx, "the Pause buttons for an admin", `!!document.querySelector('button[aria-label="Pause queue emails"]')`)
	waitJS(t, ctx, "the audit part for an admin", `!document.querySelector('#sec-audit').hidden && document.querySelector('#audit').textContent.includes('Verifies')`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(retry))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the retried job available", cell("images", "available")+` === "1"`)
	if job, err := srv.store.GetJob(context.Background(), deadID); err != nil || job.State != db.StateAvailable {
		t.Errorf("job %d after the admin's Retry = %s, %v; want available", deadID, job.State, err)
	}
	// The audit log names the admin as the one who retried.
	recs, err := srv.store.ListAuditBySubject(context.Background(), db.AuditSubjectRequest{Subject: db.JobSubject(deadID), Limit: 1})
	if err != nil || len(recs.Records) != 1 || recs.Records[0].Action != "retry" || recs.Records[0].Principal != "boss" {
		t.Errorf("newest audit record of job %d = %+v, %v; want a retry by boss", deadID, recs.Records, err)
	}
}

// TestStatusPage_WrapsLongErrorsShowsExpiryPlainlyAndHasAnIcon: on a phone
// a dead job's long unbroken error wraps beside its "Last error" label
// instead of squeezing it; an expired named lease and an expired claim are
// shown plainly (muted), not as an alarm; and a visit asks for no address
// the server does not serve (the icon), so nothing is refused or counted
// as an unmatched 404.
func TestStatusPage_WrapsLongErrorsShowsExpiryPlainlyAndHasAnIcon(t *testing.T) {
	ctx := newBrowser(t, 390, 844)
	ps := newPageServer(t, nil)
	longErr := "decode:" + strings.Repeat("0123456789abcdef", 30)
	var dead jobJSON
	ps.call("", "POST", "/v1/jobs", `{"queue":"images","max_attempts":1}`, 201, &dead)
	ps.call("", "POST", "/v1/claim", `{"worker":"w2","queues":["images"]}`, 200, nil)
	ps.call("", "POST", fmt.Sprintf("/v1/jobs/%d/fail", dead.ID), fmt.Sprintf(`{"worker":"w2","error":%q,"final":true}`, longErr), 200, nil)
	ps.call("", "POST", "/v1/jobs", `{"queue":"emails"}`, 201, nil)
	ps.call("", "POST", "/v1/claim", `{"worker":"w1","queues":["emails"],"lease_ms":1}`, 200, nil)
	ps.call("", "POST", "/v1/leases/%2Fdata%2Fold.csv/acquire", `{"holder":"etl-1","ttl_ms":1}`, 200, nil)
	time.Sleep(10 * time.Millisecond) // both run out

	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(ps.url+"/")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the dead job's error", `document.querySelector('#dead tbody').textContent.includes('decode:0123')`)
	waitJS(t, ctx, "the expired lease and claim",
		`document.querySelector('#leases tbody').textContent.includes('expired') && document.querySelector('#claimed tbody').textContent.includes('expired')`)

	// The label beside the error keeps its width (a one-letter column was
	// a few pixels), and the error wraps within the screen.
	label := evalJS[float64](t, ctx, `parseFloat(getComputedStyle(document.querySelector('#dead tbody td.err'), '::before').width)`)
	if label < 40 {
		t.Errorf("the \"Last error\" label is %.1f px wide on a phone, want the label's own width (≥ 40 px)", label)
	}
	if w := evalJS[float64](t, ctx, `document.documentElement.scrollWidth - window.innerWidth`); w > 0 {
		t.Errorf("on a 390 px wide phone the page is %v px wider than the screen", w)
	}

	// Expiry is shown like the other muted text, not bold red.
	for _, table := range []string{"leases", "claimed"} {
		style := evalJS[string](t, ctx, fmt.Sprintf(`(() => {
			const t = [...document.querySelectorAll('#%s tbody time')].find((t) => t.textContent.startsWith('expired'));
			const s = getComputedStyle(t), muted = getComputedStyle(document.querySelector('#updated'));
			return s.fontWeight + ' ' + (s.color === muted.color ? 'muted' : s.color);
		})()`, table))
		if style != "400 muted" {
			t.Errorf("an expired %s entry is shown with weight and colour %q, want \"400 muted\" (not an alarm)", table, style)
		}
	}
	screenshot(t, ctx, t.TempDir(), "status-phone-long-error.png")

	// The page names its icon; the server serves every address the visit
	// asked for: no unmatched 404, no refusal.
	if href := evalJS[string](t, ctx, `(document.querySelector('link[rel="icon"]') || {}).href || ''`); !strings.Contains(href, "/assets/favicon.svg") {
		t.Errorf("the page's icon link = %q, want /assets/favicon.svg", href)
	}
	// The browser asks for an icon after the page loaded: wait until it
	// did (a third asset, or an unmatched request).
	metrics := func() string {
		res, err := http.Get(ps.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	var m string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		m = metrics()
		if strings.Contains(m, `route="unmatched"`) ||
			strings.Contains(m, `fenceq_http_request_duration_seconds_count{code="200",method="GET",route="/assets/*"} 3`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the browser asked for no icon within 15 s:\n%s", m)
		}
	}
	for _, line := range strings.Split(m, "\n") {
		if strings.HasPrefix(line, "fenceq_http_request_duration_seconds_count") &&
			(strings.Contains(line, `route="unmatched"`) || strings.Contains(line, `code="404"`)) {
			t.Errorf("after a visit, /metrics counts a request no route served: %s", line)
		}
	}
	var stats struct {
		Refusals []struct {
			Endpoint, Code string
		} `json:"refusals"`
	}
	ps.call("", "GET", "/v1/stats", "", 200, &stats)
	if len(stats.Refusals) != 0 {
		t.Errorf("after a visit, GET /v1/stats counts refusals: %+v", stats.Refusals)
	}
}
