package metricsauth_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/prometheus/client_golang/prometheus"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/usher-llm/usher/kube/metricsauth"
	"github.com/usher-llm/usher/metrics"
)

// Example guards a metrics endpoint with a Reviewer on a fake API server that knows one
// token, Prometheus's, whose service account may get /metrics. In a cluster, the client comes
// from metricsauth.Connect.
func Example() {
	client := fake.NewClientset()
	client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		if tr.Spec.Token == "prometheus-token" {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "system:serviceaccount:monitoring:prometheus"}}
		}
		return true, tr, nil
	})
	client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview)
		sar.Status.Allowed = sar.Spec.User == "system:serviceaccount:monitoring:prometheus" &&
			sar.Spec.NonResourceAttributes.Path == "/metrics" && sar.Spec.NonResourceAttributes.Verb == "get"
		return true, sar, nil
	})

	rev, err := metricsauth.New(metricsauth.Options{Client: client})
	if err != nil {
		fmt.Println(err)
		return
	}
	exp, err := metrics.NewExporter(metrics.ExporterOptions{Gatherer: prometheus.NewRegistry(), Authenticate: rev.Authenticate})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(exp)
	defer srv.Close()

	for _, token := range []string{"prometheus-token", "someone-else"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(token, resp.StatusCode)
	}
	// Output:
	// prometheus-token 200
	// someone-else 401
}
