package server

import "net/http"

// Mount serves handler (the owner dashboard) at the given patterns of the
// main listener, beside /graphql and the health endpoints.
func (h *Handler) Mount(handler http.Handler, patterns ...string) {
	for _, p := range patterns {
		h.mux.Handle(p, handler)
	}
}

// ClientIP is the address a request is attributed to (password throttles,
// audit rows), decided the same way for every entry point.
func (h *Handler) ClientIP(r *http.Request) string { return h.gw.ClientIP(r) }
