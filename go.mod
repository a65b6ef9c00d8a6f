module github.com/usher-llm/usher

go 1.26
