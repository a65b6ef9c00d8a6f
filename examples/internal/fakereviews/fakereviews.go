// Package fakereviews is, for the example programs' tests, a fake Kubernetes API server that
// answers the TokenReviews and SubjectAccessReviews of -metrics-endpoint-auth.
package fakereviews

import (
	"errors"
	"sync/atomic"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Reviews answers for two service accounts: "prometheus-token" may get /metrics,
// "nobody-token" may not; any other token is not authenticated. While Fail is set every call
// fails. Calls counts the TokenReviews. Safe for concurrent use.
type Reviews struct {
	Calls atomic.Int64
	Fail  atomic.Bool
}

// Clientset returns a fake clientset that answers from r.
func (r *Reviews) Clientset() *fake.Clientset {
	cs := fake.NewClientset()
	users := map[string]string{"prometheus-token": "system:serviceaccount:monitoring:prometheus", "nobody-token": "system:serviceaccount:default:nobody"}
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r.Calls.Add(1)
		if r.Fail.Load() {
			return true, nil, errors.New("connection refused")
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
		name, ok := users[tr.Spec.Token]
		tr.Status = authnv1.TokenReviewStatus{Authenticated: ok, User: authnv1.UserInfo{Username: name}}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview).DeepCopy()
		na := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = sar.Spec.User == users["prometheus-token"] && na != nil && na.Path == "/metrics" && na.Verb == "get"
		return true, sar, nil
	})
	return cs
}
