// Package web serves the browser side of the ERP from files embedded in the
// binary: the event-stream page ("Поток событий", /events), GraphiQL
// (/playground) and their assets. The files are built from this directory's
// sources into dist/ by `make web` (Vite) and committed, so neither building
// the binary nor running it needs Node, npm or a CDN.
package web

import (
	"bytes"
	"compress/gzip"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
)

//go:embed dist
var dist embed.FS

// Config is what the server tells the pages.
type Config struct {
	// TimeZone is the zone the page shows times in; nil means UTC. It
	// must be an IANA zone (time.LoadLocation of a name like
	// Europe/Moscow), not time.Local.
	TimeZone *time.Location
	// NoPlayground leaves /playground unmounted (production: PLAYGROUND=false).
	NoPlayground bool
}

// Register mounts the pages on mux:
//
//	GET /events       the event-stream page
//	GET /playground   GraphiQL pointed at /graphql (queries and subscriptions)
//	GET /assets/…     their scripts, styles and fonts (hashed names, cached for a year)
//	GET /config.json  {"timeZone": "Europe/Moscow"}
func Register(mux *http.ServeMux, cfg Config) {
	files, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // the embed pattern above guarantees dist exists
	}
	zone := "UTC"
	if cfg.TimeZone != nil {
		zone = cfg.TimeZone.String()
	}
	configJSON, _ := json.Marshal(map[string]string{"timeZone": zone})

	mux.Handle("GET /events", page(files, "index.html", eventsCSP))
	if !cfg.NoPlayground {
		mux.Handle("GET /playground", page(files, "playground.html", ""))
	}
	mux.Handle("GET /assets/", &assets{files: files})
	mux.HandleFunc("GET /config.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(configJSON)
	})
}

// eventsCSP keeps the events page to its own origin: scripts and styles
// from /assets, requests to /graphql (and its websocket) and /config.json.
// GraphiQL gets none: Monaco sets inline styles and starts workers.
const eventsCSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// page serves one HTML file, never cached, so that a new build's asset
// names are picked up at once.
func page(files fs.FS, name, csp string) http.Handler {
	body, err := fs.ReadFile(files, name)
	if err != nil {
		// A build without this page: say so instead of a bare 404.
		body = []byte(fmt.Sprintf("<!doctype html><p>web/dist/%s is missing: run <code>make web</code> and rebuild.</p>", name))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		if csp != "" {
			h.Set("Content-Security-Policy", csp)
		}
		_, _ = w.Write(body)
	})
}

// assets serves dist/assets. Names carry a content hash, so they are
// immutable; text files are gzipped once, on first request, for clients
// that accept it (Monaco alone is ~2.8 MB, ~0.7 MB gzipped).
type assets struct {
	files   fs.FS
	gzipped sync.Map // name → *gzipOnce
}

type gzipOnce struct {
	once sync.Once
	body []byte // nil when gzip does not pay off
}

func (a *assets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(path.Clean(r.URL.Path), "/")
	body, err := fs.ReadFile(a.files, name)
	if err != nil || !strings.HasPrefix(name, "assets/") {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Add("Vary", "Accept-Encoding")
	if ctype := contentType(name); ctype != "" {
		h.Set("Content-Type", ctype)
	}
	if compressible(name) && acceptsGzip(r) {
		v, _ := a.gzipped.LoadOrStore(name, &gzipOnce{})
		g := v.(*gzipOnce)
		g.once.Do(func() { g.body = gzipBytes(body) })
		if g.body != nil {
			h.Set("Content-Encoding", "gzip")
			body = g.body
		}
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".ttf":
		return "font/ttf"
	case ".woff2":
		return "font/woff2"
	case ".svg":
		return "image/svg+xml"
	}
	return ""
}

func compressible(name string) bool {
	switch path.Ext(name) {
	case ".js", ".css", ".ttf", ".svg", ".json":
		return true
	}
	return false
}

func acceptsGzip(r *http.Request) bool {
	for _, enc := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(enc), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// gzipBytes compresses b, or returns nil when that saves less than a tenth.
func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(b); err != nil {
		return nil
	}
	if err := zw.Close(); err != nil {
		return nil
	}
	if buf.Len() > len(b)*9/10 {
		return nil
	}
	return buf.Bytes()
}
