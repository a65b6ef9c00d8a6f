module github.com/usher-llm/usher/bench

go 1.26.0

require github.com/usher-llm/usher v0.0.0

replace github.com/usher-llm/usher => ..
