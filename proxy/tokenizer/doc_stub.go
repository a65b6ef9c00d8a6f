// Package tokenizer (stand-in doc on helper T's branch; E's doc.go replaces it at merge).
package tokenizer
