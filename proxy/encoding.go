package proxy

import (
	"bufio"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/usher-llm/usher/proxy/openai"
)

// This file reads the Content-Encoding of a request body. The gateway decodes what the
// standard library can — gzip (and its old name x-gzip) and deflate (RFC 9110's "deflate":
// zlib's format) — and refuses the rest with 415, naming Content-Encoding: br and zstd would
// need a dependency in every importer's build, and compress (Unix LZW) is obsolete. Model
// servers do not decode request bodies themselves (vLLM would read gzip bytes as broken
// JSON), so the backend always gets the decoded body and no Content-Encoding.
//
// One coding at most: RFC 9110 allows a list applied in order, but no client stacks them, and
// each layer of compression multiplies what a small body can inflate to.

// contentCoding returns the content coding of a request body with header hd: "" for none
// (absent, empty or identity), "gzip" or "deflate"; or the 415 that refuses it.
func contentCoding(hd http.Header) (string, *openai.Error) {
	coding := ""
	for _, v := range hd.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			c = strings.ToLower(strings.TrimSpace(c))
			switch c {
			case "", "identity":
				continue
			case "gzip", "x-gzip":
				c = "gzip"
			case "deflate":
			default:
				return "", unsupportedEncoding(fmt.Sprintf("Content-Encoding %q is not supported: send the body unencoded, or as gzip or deflate", clip(c)))
			}
			if coding != "" {
				return "", unsupportedEncoding("Content-Encoding lists more than one coding: send the body unencoded, or with one of gzip or deflate")
			}
			coding = c
		}
	}
	return coding, nil
}

func unsupportedEncoding(msg string) *openai.Error {
	return &openai.Error{Status: http.StatusUnsupportedMediaType, Type: openai.TypeInvalidRequest,
		Code: "unsupported_content_encoding", Message: msg}
}

// newDecoder returns a reader of what r holds, encoded with coding ("gzip" or "deflate").
// Opening reads the header of the stream, so it fails at once on a body that is not of
// that coding. r is a *bufio.Reader so that the decoder reads through it rather than a
// buffer of its own: what follows the encoded data stays in r, to be found.
func newDecoder(coding string, r *bufio.Reader) (io.ReadCloser, error) {
	if coding == "gzip" {
		return gzip.NewReader(r)
	}
	return zlib.NewReader(r)
}

// badEncoding answers a body that is not what its Content-Encoding says.
func badEncoding(coding string) *openai.Error {
	return &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest, Code: "invalid_content_encoding",
		Message: fmt.Sprintf("the request body is not valid %s data, as its Content-Encoding says it is", coding)}
}
