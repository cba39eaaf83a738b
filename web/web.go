// Package web serves fenceq's status page: HTML from html/template, one
// style sheet and one script, all embedded in the binary. No CDN, no build
// step; the page works offline. The page is a shell: its script polls the
// JSON API (GET /v1/status every 2 s, or a job and its history on a job's
// page) with the bearer token the operator entered once for the tab.
//
// Routes, relative to the server's root:
//
//	GET /               the status page
//	GET /jobs/{id}      one job: fields, errors, result, attestation, history
//	GET /assets/{name}  app.css, app.js, favicon.svg
//	GET /favicon.ico    the icon, for clients that ask for it without the page's link
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html/template"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"time"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// contentSecurityPolicy allows the page's own script, style and API calls
// and nothing else: no inline script, no other origin.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

type asset struct {
	body    []byte
	version string // first hex digits of the body's SHA-256
	ctype   string
}

type handler struct {
	pages  *template.Template
	assets map[string]asset
	mux    *http.ServeMux
}

// pageData is what the templates see.
type pageData struct {
	Title string
	Page  string // "status" or "job"
	JobID uint64
}

// Handler serves the status page, the job page and their assets. It
// panics if the embedded files do not parse, which a test catches at build
// time.
func Handler() http.Handler {
	h := &handler{assets: map[string]asset{}, mux: http.NewServeMux()}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err)
	}
	err = fs.WalkDir(static, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(static, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		ctype := mime.TypeByExtension(path.Ext(name))
		if ctype == "" {
			ctype = "application/octet-stream"
		}
		h.assets[name] = asset{body: body, version: hex.EncodeToString(sum[:6]), ctype: ctype}
		return nil
	})
	if err != nil {
		panic(err)
	}
	h.pages = template.Must(template.New("").Funcs(template.FuncMap{
		// asset gives an asset's URL with its content version, so that a
		// new binary's files are never mixed with a cached old one.
		"asset": func(name string) string {
			a, ok := h.assets[name]
			if !ok {
				panic("web: no asset " + name)
			}
			return "/assets/" + name + "?v=" + a.version
		},
		"states": func() []string {
			return []string{"available", "scheduled", "claimed", "completed", "dead", "cancelled"}
		},
	}).ParseFS(templateFS, "templates/*.html"))

	h.mux.HandleFunc("GET /{$}", h.statusPage)
	h.mux.HandleFunc("GET /jobs/{id}", h.jobPage)
	h.mux.HandleFunc("GET /assets/{name}", h.serveAsset)
	h.mux.HandleFunc("GET /favicon.ico", h.favicon)
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *handler) statusPage(w http.ResponseWriter, r *http.Request) {
	h.render(w, "status.html", pageData{Title: "fenceq status", Page: "status"})
}

func (h *handler) jobPage(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		http.Error(w, "no such job page: the id must be a positive integer", http.StatusNotFound)
		return
	}
	h.render(w, "job.html", pageData{Title: "Job " + strconv.FormatUint(id, 10) + " · fenceq", Page: "job", JobID: id})
}

func (h *handler) render(w http.ResponseWriter, name string, data pageData) {
	var buf bytes.Buffer
	if err := h.pages.ExecuteTemplate(&buf, name, data); err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("Content-Security-Policy", contentSecurityPolicy)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	w.Write(buf.Bytes())
}

func (h *handler) serveAsset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	a, ok := h.assets[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", a.ctype)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("ETag", `"`+a.version+`"`)
	if r.URL.Query().Get("v") == a.version {
		hdr.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		hdr.Set("Cache-Control", "no-cache")
	}
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
}

// favicon serves the page's icon at the address browsers ask for when a
// page names none (and some ask for anyway), so that a visit is not a 404.
func (h *handler) favicon(w http.ResponseWriter, r *http.Request) {
	a := h.assets["favicon.svg"]
	hdr := w.Header()
	hdr.Set("Content-Type", a.ctype)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Cache-Control", "public, max-age=86400")
	http.ServeContent(w, r, "favicon.svg", time.Time{}, bytes.NewReader(a.body))
}
