package server_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	"github.com/btk-project/btk/internal/gateway"
)

// BenchmarkProxyVsBare compares btk's reverse proxy (key check, header
// rewrite, the key watch of streams) with a bare httputil.ReverseProxy in
// front of the same upstream, side by side over loopback:
//
//	go test ./internal/server -run '^$' -bench ProxyVsBare -benchtime 3s
func BenchmarkProxyVsBare(b *testing.B) {
	e := newEnv(b)
	k := e.createKey(e.admin(), "bench-proxy")
	e.svc.FlushUsage(b.Context())
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	bare := httputil.NewSingleHostReverseProxy(u)
	bare.Transport = gateway.ProxyTransport()
	bp := httptest.NewServer(bare)
	defer bp.Close()
	p := e.proxyFor(up.URL)
	for _, c := range []struct{ name, url string }{{"bare", bp.URL}, {"btk", p.URL}} {
		b.Run(c.name, func(b *testing.B) {
			tr := &http.Transport{MaxIdleConnsPerHost: 64}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest("GET", c.url+"/x", nil)
					req.Header.Set("X-Api-Key", k.Plaintext)
					res, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
			})
		})
	}
}
