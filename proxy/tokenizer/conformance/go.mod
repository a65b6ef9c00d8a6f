module github.com/usher-llm/usher/proxy/tokenizer/conformance

go 1.26.0

require (
	github.com/usher-llm/usher v0.0.0-00010101000000-000000000000
	golang.org/x/text v0.28.0
)

replace github.com/usher-llm/usher => ../../..
