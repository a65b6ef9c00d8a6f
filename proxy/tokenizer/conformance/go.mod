module github.com/usher-llm/usher/proxy/tokenizer/conformance

go 1.26.0

require golang.org/x/text v0.28.0

replace github.com/usher-llm/usher => ../../..

ignore ./api
