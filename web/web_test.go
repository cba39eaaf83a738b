package web_test

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/api"
)

type reply struct {
	status int
	header http.Header
	body   string
}

func get(t *testing.T, url string) reply {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return reply{res.StatusCode, res.Header, string(b)}
}

// TestPages_AreServedWithTheirAssetsAndPolicy runs through the real API
// server, with principals on: the page and its assets need no token (the
// data does).
func TestPages_AreServedWithTheirAssetsAndPolicy(t *testing.T) {
	_, line, err := api.NewToken("prod", []api.Role{api.RoleProducer})
	if err != nil {
		t.Fatal(err)
	}
	principals, err := api.ParsePrincipals(strings.NewReader(line))
	if err != nil {
		t.Fatal(err)
	}
	ps := newPageServer(t, principals)

	page := get(t, ps.url+"/")
	if page.status != http.StatusOK || !strings.HasPrefix(page.header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %d %s, want 200 text/html", page.status, page.header.Get("Content-Type"))
	}
	if csp := page.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("GET / Content-Security-Policy = %q, want only the page's own scripts", csp)
	}
	for _, want := range []string{`data-page="status"`, `id="queues"`, `id="chart"`, `id="token-dialog"`, `<th scope="col" class="num">dead</th>`} {
		if !strings.Contains(page.body, want) {
			t.Errorf("GET / does not contain %s", want)
		}
	}
	if strings.Contains(page.body, "http://") || strings.Contains(page.body, "https://") {
		t.Errorf("GET / refers to another origin (the page must work offline)")
	}
	assets := regexp.MustCompile(`(?:href|src)="(/assets/[^"]+)"`).FindAllStringSubmatch(page.body, -1)
	if len(assets) != 3 {
		t.Fatalf("GET / links %d assets, want favicon.svg, app.css and app.js", len(assets))
	}
	for _, m := range assets {
		a := get(t, ps.url+strings.ReplaceAll(m[1], "&amp;", "&"))
		if a.status != http.StatusOK || !strings.Contains(a.header.Get("Cache-Control"), "immutable") || len(a.body) < 200 {
			t.Errorf("GET %s = %d, Cache-Control %q, %d bytes; want 200, immutable, the file", m[1], a.status, a.header.Get("Cache-Control"), len(a.body))
		}
		// The script's only URLs are the XML namespaces of HTML and SVG.
		rest := strings.NewReplacer("http://www.w3.org/2000/svg", "", "http://www.w3.org/1999/xhtml", "").Replace(a.body)
		if strings.Contains(rest, "://") {
			t.Errorf("%s refers to another origin", m[1])
		}
	}
	if a := get(t, ps.url+"/assets/app.js?v=old"); a.status != http.StatusOK || a.header.Get("Cache-Control") != "no-cache" ||
		!strings.HasPrefix(a.header.Get("Content-Type"), "text/javascript") {
		t.Errorf("GET /assets/app.js?v=old = %d, %q, %q; want 200 no-cache text/javascript", a.status, a.header.Get("Cache-Control"), a.header.Get("Content-Type"))
	}

	// The icon, also where browsers look for it when a page names none.
	icon := get(t, ps.url+"/favicon.ico")
	if icon.status != http.StatusOK || icon.header.Get("Content-Type") != "image/svg+xml" || !strings.HasPrefix(icon.body, "<svg") {
		t.Errorf("GET /favicon.ico = %d %q, want 200 image/svg+xml", icon.status, icon.header.Get("Content-Type"))
	}

	job := get(t, ps.url+"/jobs/42")
	if job.status != http.StatusOK || !strings.Contains(job.body, `data-job="42"`) || !strings.Contains(job.body, "<title>Job 42 · fenceq</title>") {
		t.Errorf("GET /jobs/42 = %d, want 200 with the job's id", job.status)
	}
	for _, path := range []string{"/jobs/abc", "/jobs/0", "/jobs/-1", "/assets/nope.js", "/nope"} {
		if r := get(t, ps.url+path); r.status != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", path, r.status)
		}
	}
	if r := get(t, ps.url+"/v1/status"); r.status != http.StatusUnauthorized {
		t.Errorf("GET /v1/status without a token = %d, want 401", r.status)
	}
}
