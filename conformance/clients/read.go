// Read every answer a plan names through Go's net/http, as its users do,
// and keep what the client decoded (tests/it/http_clients.rs).
//
//	go run read.go PLAN OUT
//
// PLAN is the test's JSON plan (the headers every request carries; the
// reads, each a URL, the Accept-Encoding to send and its output's name).
// Each read's decoded body goes to OUT/NAME and what came with it to
// OUT/NAME.json; OUT/decodes.json lists the codings net/http decodes.
//
// net/http decodes gzip by itself only when it asked for it: a gzip read
// leaves Accept-Encoding to the Transport (which sends "gzip" and decodes
// the answer), and the standard library has no brotli or zstd decoder.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
)

type read struct {
	URL    string `json:"url"`
	Accept string `json:"accept"`
	Name   string `json:"name"`
}

type plan struct {
	Headers map[string]string `json:"headers"`
	Reads   []read            `json:"reads"`
}

type meta struct {
	Status   *int    `json:"status"`
	Encoding *string `json:"encoding"`
	Error    *string `json:"error"`
}

func fetch(client *http.Client, p plan, r read) (meta, []byte) {
	var m meta
	fail := func(err error) (meta, []byte) {
		text := err.Error()
		m.Error = &text
		return m, nil
	}
	request, err := http.NewRequest("GET", r.URL, nil)
	if err != nil {
		return fail(err)
	}
	for name, value := range p.Headers {
		request.Header.Set(name, value)
	}
	if r.Accept != "gzip" {
		request.Header.Set("Accept-Encoding", r.Accept)
	}
	response, err := client.Do(request)
	if err != nil {
		return fail(err)
	}
	defer response.Body.Close()
	body, err := io.ReadAll(response.Body)
	if err != nil {
		return fail(err)
	}
	status := response.StatusCode
	m.Status = &status
	encoding := response.Header.Get("Content-Encoding")
	if response.Uncompressed {
		// The Transport decoded it and removed the header.
		encoding = "gzip"
	}
	if encoding != "" {
		m.Encoding = &encoding
	}
	return m, body
}

func main() {
	planPath, out := os.Args[1], os.Args[2]
	text, err := os.ReadFile(planPath)
	if err != nil {
		panic(err)
	}
	var p plan
	if err := json.Unmarshal(text, &p); err != nil {
		panic(err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		panic(err)
	}
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
			panic(err)
		}
	}
	write("decodes.json", []byte(`["identity","gzip"]`))
	client := &http.Client{}
	for _, r := range p.Reads {
		m, body := fetch(client, p, r)
		encoded, err := json.Marshal(m)
		if err != nil {
			panic(fmt.Sprint(err))
		}
		write(r.Name, body)
		write(r.Name+".json", encoded)
	}
}
