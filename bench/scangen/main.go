// Command scangen writes a tree of text files for bench/scan.sh: about
// -size bytes in files of 4 KiB to 512 KiB (source-like lines, hex and
// base64 noise, "btk_" prefixes that are not keys), with -keys well-formed
// keys spread through it, and a .git directory and binary files that a scan
// skips. The content is fixed by -seed.
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
)

func main() {
	dir := flag.String("dir", "", "directory to write the tree into (created)")
	size := flag.Int64("size", 1<<30, "total bytes of text files")
	keys := flag.Int("keys", 100, "well-formed keys to plant")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()
	if *dir == "" {
		log.Fatal("-dir is required")
	}
	r := rand.New(rand.NewPCG(*seed, 2))
	words := []string{"func", "return", "if", "err", "nil", "ctx", "context", "string", "int", "for", "range", "var",
		"const", "package", "import", "the", "key", "token", "config", "server", "client", "request", "response",
		"user", "name", "value", "true", "false", "json", "http", "btk_", "api_key", "secret", "hash", "=", ":=", "{", "}"}
	var written int64
	files := 0
	// Every plantEvery bytes, one key (so that -keys spread over -size).
	plantEvery := *size / int64(max(*keys, 1))
	nextPlant := plantEvery / 2
	planted := 0
	for written < *size {
		sub := filepath.Join(*dir, fmt.Sprintf("d%03d", files/200), fmt.Sprintf("e%02d", files%200/20))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			log.Fatal(err)
		}
		f, err := os.Create(filepath.Join(sub, fmt.Sprintf("f%06d.txt", files)))
		if err != nil {
			log.Fatal(err)
		}
		w := bufio.NewWriterSize(f, 64<<10)
		target := int64(4<<10 + r.IntN(508<<10))
		var n int64
		for n < target && written+n < *size {
			var line []byte
			switch r.IntN(10) {
			case 0: // hex noise
				b := make([]byte, 24)
				for i := range b {
					b[i] = byte(r.Uint32())
				}
				line = fmt.Appendf(nil, "sha = %x\n", b)
			case 1: // base64 noise
				b := make([]byte, 33)
				for i := range b {
					b[i] = byte(r.Uint32())
				}
				line = fmt.Appendf(nil, "\tdata: %q,\n", base64.RawURLEncoding.EncodeToString(b))
			default:
				for range 4 + r.IntN(10) {
					line = append(line, words[r.IntN(len(words))]...)
					line = append(line, ' ')
				}
				line = append(line, '\n')
			}
			if written+n >= nextPlant && planted < *keys {
				h := sha256.Sum256(fmt.Appendf(nil, "%d-%d", *seed, planted))
				key := "btk_" + fmt.Sprintf("%x", h[:4]) + "_" + base64.RawURLEncoding.EncodeToString(h[:]) // 43 chars, low bits 0
				line = fmt.Appendf(nil, "BTK_API_KEY=%s\n", key)
				planted++
				nextPlant += plantEvery
			}
			w.Write(line)
			n += int64(len(line))
		}
		if err := w.Flush(); err != nil {
			log.Fatal(err)
		}
		f.Close()
		written += n
		files++
	}
	// What a scan skips: a .git directory and binary files, with keys in them.
	const skipped = "btk_00000000_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" // btk:allow: made up
	git := filepath.Join(*dir, ".git", "objects")
	os.MkdirAll(git, 0o755)
	os.WriteFile(filepath.Join(git, "pack"), []byte(skipped+"\n"), 0o644)
	os.WriteFile(filepath.Join(*dir, "image.bin"), append([]byte{0x89, 'P', 'N', 'G', 0}, skipped...), 0o644)
	fmt.Printf("%d files, %d bytes, %d keys planted\n", files, written, planted)
}
