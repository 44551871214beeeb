package client

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/Khan/genqlient/graphql"
)

// chainServer answers KeyUsage for the keys it holds, by id, and counts
// the requests.
type chainServer struct {
	keys     map[string]KeyUsageSeries
	requests int
}

func (s *chainServer) MakeRequest(_ context.Context, req *graphql.Request, resp *graphql.Response) error {
	s.requests++
	id := req.Variables.(*__KeyUsageInput).Id
	var k *KeyUsageSeries
	if v, ok := s.keys[id]; ok {
		k = &v
	}
	b, _ := json.Marshal(map[string]any{"apiKey": k})
	return json.Unmarshal(b, resp.Data)
}

// chainOf makes n keys k0 (oldest) … k(n-1) linked by rotation, each with
// one refused use.
func chainOf(n int) map[string]KeyUsageSeries {
	keys := map[string]KeyUsageSeries{}
	day := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	for i := range n {
		k := KeyUsageSeries{Id: fmt.Sprintf("k%d", i), Name: "payments", Usage: []UsagePoint{{Start: day, Refused: 1}}}
		if i > 0 {
			prev := fmt.Sprintf("k%d", i-1)
			k.RotatedFromId = &prev
		}
		if i < n-1 {
			next := fmt.Sprintf("k%d", i+1)
			k.ReplacedById = &next
		}
		keys[k.Id] = k
	}
	return keys
}

// docs/usage.md#reading-it: the chain is followed both ways from any of its
// keys, newest first, each key read once; a loop ends it, a key that is not
// visible ends it, and MaxChainKeys bounds it.
func TestRotationChainUsage(t *testing.T) {
	ids := func(chain []KeyUsageSeries) string {
		s := ""
		for _, k := range chain {
			s += k.Id + " "
		}
		return s
	}
	srv := &chainServer{keys: chainOf(4)}
	chain, cut, err := RotationChainUsage(context.Background(), srv, srv.keys["k1"], nil, nil, nil)
	if err != nil || cut || ids(chain) != "k3 k2 k1 k0 " || srv.requests != 3 {
		t.Fatalf("from k1: %q cut=%v, %d requests, %v", ids(chain), cut, srv.requests, err)
	}
	if sum := SumUsage(chain[0].Usage, chain[1].Usage, chain[2].Usage); len(sum) != 1 || sum[0].Refused != 3 {
		t.Errorf("sum %+v", sum)
	}

	// A loop (k0 claims k3 as its predecessor) and a key not visible.
	loop := "k3"
	k0 := srv.keys["k0"]
	k0.RotatedFromId = &loop
	srv.keys["k0"] = k0
	delete(srv.keys, "k2")
	srv.requests = 0
	chain, _, err = RotationChainUsage(context.Background(), srv, srv.keys["k1"], nil, nil, nil)
	if err != nil || ids(chain) != "k1 k0 k3 " || srv.requests != 4 {
		t.Fatalf("loop and gap: %q, %d requests, %v", ids(chain), srv.requests, err)
	}

	srv = &chainServer{keys: chainOf(MaxChainKeys + 5)}
	newest := srv.keys[fmt.Sprintf("k%d", MaxChainKeys+4)]
	chain, cut, err = RotationChainUsage(context.Background(), srv, newest, nil, nil, nil)
	if err != nil || !cut || len(chain) != MaxChainKeys || srv.requests != MaxChainKeys-1 {
		t.Fatalf("a long chain: %d keys, cut=%v, %d requests, %v", len(chain), cut, srv.requests, err)
	}
}
