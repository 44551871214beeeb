package btk

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// Device tokens are OWASP's device cookies (docs/security.md): a successful
// login hands the client one, bound to the account; a later login of that
// account presenting it is charged to the token's own budget instead of the
// account-wide one, so an attacker who drains the account's budget from many
// addresses cannot lock out its owner. A token holds a random nonce and a
// MAC of the account and nonce under the server secret: nothing is stored,
// and a token is worth nothing for any other account.
const devicePrefix = "btkd_"

// maxDeviceToken bounds what is parsed (a token is 71 bytes).
const maxDeviceToken = 128

// DeviceToken returns a new device token of the account.
func (t *Tokens) DeviceToken(accountID string) string {
	var nonce [16]byte
	rand.Read(nonce[:])
	n := base64.RawURLEncoding.EncodeToString(nonce[:])
	return devicePrefix + n + "." + t.deviceMAC(accountID, n)
}

// CheckDevice returns the nonce of token when it is a device token this
// server issued to the account, else "".
func (t *Tokens) CheckDevice(token, accountID string) string {
	if len(token) > maxDeviceToken || !strings.HasPrefix(token, devicePrefix) {
		return ""
	}
	n, mac, ok := strings.Cut(token[len(devicePrefix):], ".")
	if !ok || n == "" || !hmac.Equal([]byte(mac), []byte(t.deviceMAC(accountID, n))) {
		return ""
	}
	return n
}

func (t *Tokens) deviceMAC(accountID, nonce string) string {
	m := hmac.New(sha256.New, t.secret)
	m.Write([]byte("btk device\x00" + accountID + "\x00" + nonce))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:24])
}

type deviceTokenKey struct{}

// WithDeviceToken records the device token a login request presented (the
// login's deviceToken argument, the dashboard's btk_device cookie).
func WithDeviceToken(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, deviceTokenKey{}, token)
}

func deviceTokenFrom(ctx context.Context) string {
	s, _ := ctx.Value(deviceTokenKey{}).(string)
	return s
}
