// Package leaktest signs leak reports as GitHub's secret scanning signs
// them (ECDSA P-256 over SHA-256, a base64 DER signature; docs/leaks.md),
// for the tests of leak response in the service, the server and the binary.
package leaktest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"testing"
)

// Signer is a report signing key pair of the test, as GitHub holds one.
type Signer struct {
	priv *ecdsa.PrivateKey
	// PEM is the public key as a --leak-report-keys file lists it.
	PEM []byte
	// ID is the hex SHA-256 of the DER public key: the key's id unless a
	// "# id:" line names it.
	ID string
}

// NewSigner makes a new key pair.
func NewSigner(t testing.TB) *Signer {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	return &Signer{
		priv: priv,
		PEM:  pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}),
		ID:   hex.EncodeToString(sum[:]),
	}
}

// Sign returns the signature of body, as the report's signature header
// carries it.
func (s *Signer) Sign(body []byte) string {
	sum := sha256.Sum256(body)
	sig, _ := ecdsa.SignASN1(rand.Reader, s.priv, sum[:])
	return base64.StdEncoding.EncodeToString(sig)
}

// Hash is the hex SHA-256 of a token: how a report's answer and a lookup
// by hash name a key.
func Hash(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}
