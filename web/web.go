// Package web serves fenceq's status page: an HTML page embedded in the
// binary that reads the JSON API. No CDN, no build step.
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Handler serves the status page at "/".
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return http.FileServer(http.FS(sub))
}
