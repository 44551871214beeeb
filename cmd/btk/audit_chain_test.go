package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// btk audit --key says, on stderr whatever the format, where the server cut
// a rotation chain longer than it follows (1,000 keys a side), and the key
// whose history reads on; a whole chain says nothing.
func TestAuditKeySaysWhereTheChainIsCut(t *testing.T) {
	const oldest = "0b7e6a1c-9d3f-4c2e-8a51-5e2f4d6c7b80"
	entry := `{"id":"e1","workspaceId":"w","action":"ROTATED","apiKeyId":"` + oldest + `","apiKeyName":"ci","newApiKeyId":"` + keyID + `",
		"revokedCount":null,"actorId":"a","actorEmail":"ops@example.com","impersonatorId":null,"impersonatorEmail":null,
		"ip":"192.0.2.1","userAgent":"btk","createdAt":"2026-11-21T22:00:00Z"}`
	page := func(chain string) string {
		return `{"data":{"apiKeyAuditLog":{"nodes":[` + entry + `],"pageInfo":{"hasNextPage":false,"endCursor":null},"rotationChain":` + chain + `}}}`
	}
	for _, c := range []struct {
		name, chain, want string
	}{
		{"older side cut", `{"keys":1001,"oldestKeyId":"` + oldest + `","newestKeyId":"` + keyID + `","olderCut":true,"newerCut":false}`,
			"btk: the rotation chain goes on before key " + oldest + " (1001 keys covered): older entries are not shown; btk audit --key " + oldest + " reads on\n"},
		{"newer side cut", `{"keys":1001,"oldestKeyId":"` + keyID + `","newestKeyId":"` + oldest + `","olderCut":false,"newerCut":true}`,
			"btk: the rotation chain goes on after key " + oldest + " (1001 keys covered): newer entries are not shown; btk audit --key " + oldest + " reads on\n"},
		{"whole", `{"keys":2,"oldestKeyId":"` + oldest + `","newestKeyId":"` + keyID + `","olderCut":false,"newerCut":false}`, ""},
	} {
		for _, format := range []string{"table", "json"} {
			loggedInTo(t, newFakeServer(t, map[string]string{"ApiKeyAuditLog": page(c.chain)}))
			s, out, errOut := testStreams(pipe, "")
			if code := btkRun(s, "audit", "--key", keyID, "-o", format); code != 0 {
				t.Fatalf("%s, %s: exit %d: %s", c.name, format, code, errOut)
			}
			if errOut.String() != c.want {
				t.Errorf("%s, %s: stderr %q; want %q", c.name, format, errOut, c.want)
			}
			if format == "json" {
				var entries []struct{ Action string }
				if err := json.Unmarshal(out.Bytes(), &entries); err != nil || len(entries) != 1 {
					t.Errorf("%s: JSON %v %s", c.name, err, out)
				}
			} else if !strings.Contains(out.String(), "ROTATED") {
				t.Errorf("%s: table %s", c.name, out)
			}
		}
	}
}
