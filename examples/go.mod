module github.com/usher-llm/usher/examples

go 1.26.0

require github.com/usher-llm/usher v0.0.0

replace github.com/usher-llm/usher => ..

require (
	github.com/usher-llm/usher/bench v0.0.0
	github.com/usher-llm/usher/kube v0.0.0
)

replace (
	github.com/usher-llm/usher/bench => ../bench
	github.com/usher-llm/usher/kube => ../kube
)
