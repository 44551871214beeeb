// Command proxybench is the other half of the reverse-proxy benchmark in
// bench/hotpath.sh: a tiny upstream, and a bare httputil.ReverseProxy in
// front of it to compare btk's proxy listener with.
//
//	go run ./bench/proxybench -upstream 127.0.0.1:18090
//	go run ./bench/proxybench -bare 127.0.0.1:18091 -to http://127.0.0.1:18090
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/btk-project/btk/internal/gateway"
)

func main() {
	upstream := flag.String("upstream", "", "serve the tiny upstream on this address")
	bare := flag.String("bare", "", "serve a bare httputil.ReverseProxy on this address")
	to := flag.String("to", "", "the upstream URL of -bare")
	flag.Parse()
	switch {
	case *upstream != "":
		body := []byte("ok\n")
		log.Fatal(serve(*upstream, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = []string{"text/plain"}
			w.Write(body)
		})))
	case *bare != "" && *to != "":
		u, err := url.Parse(*to)
		if err != nil {
			log.Fatal(err)
		}
		// What btk's proxy does minus the key check: the same Rewrite and
		// the same transport (idle connections per host raised alike).
		rp := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(u)
				pr.SetXForwarded()
			},
			Transport: gateway.ProxyTransport(),
		}
		log.Fatal(serve(*bare, rp))
	default:
		flag.Usage()
	}
}

func serve(addr string, h http.Handler) error {
	s := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	return s.ListenAndServe()
}
