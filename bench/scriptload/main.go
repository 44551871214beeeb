// Command scriptload writes, in the Redis protocol, the commands for
// bench/script.sh: load a key-check script, give 96 workspaces a revision
// token, then -n key checks of 384 keys in turn, each accepted (limits of
// 10^9, the server's clock), as gcra.lua receives them from btk.
package main

import (
	"bufio"
	"crypto/sha1" // the script's name in Redis (EVALSHA), not a security use
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
)

func main() {
	script := flag.String("script", "internal/redisstate/gcra.lua", "the script to load and call")
	n := flag.Int("n", 1000, "key checks to send")
	flag.Parse()
	src, err := os.ReadFile(*script)
	if err != nil {
		log.Fatal(err)
	}
	sum := sha1.Sum(src)
	sha := hex.EncodeToString(sum[:])
	w := bufio.NewWriter(os.Stdout)
	command := func(args ...string) {
		fmt.Fprintf(w, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(w, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	const workspaces, token = 96, "bench:1732440000.123456"
	command("SCRIPT", "LOAD", string(src))
	for i := range workspaces {
		command("SET", fmt.Sprintf("btk:{ws%02d}:rev", i), token)
	}
	// The numbers as btk packs them: minute and day limits, no stored day
	// state, no clock of the caller's.
	var nums [32]byte
	binary.LittleEndian.PutUint64(nums[0:], math.Float64bits(1e9))
	binary.LittleEndian.PutUint64(nums[8:], math.Float64bits(1e9))
	for i := range *n {
		ws, key := i%workspaces, i%(4*workspaces)
		command("EVALSHA", sha, "2", fmt.Sprintf("btk:{ws%02d}:rev", ws),
			fmt.Sprintf("btk:{ws%02d}:rl:%024d", ws, key), token, string(nums[:]), "bench")
	}
	if err := w.Flush(); err != nil {
		log.Fatal(err)
	}
}
