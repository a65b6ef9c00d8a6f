package metricsauth_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/usher-llm/usher/kube/metricsauth"
	"github.com/usher-llm/usher/metrics"
)

// apiServer is a fake API server's judgment: tokens and who they are, and who may get what.
type apiServer struct {
	users     map[string]authnv1.UserInfo // by token
	audiences []string                    // what a TokenReview's status says
	allowed   map[string]bool             // users allowed to get the path
	fail      atomic.Pointer[error]       // every call fails with it, when set
	release   chan struct{}               // if not nil, TokenReviews wait for it
	entered   chan struct{}               // if not nil, told of each TokenReview's start

	tokenReviews, accessReviews atomic.Int64
	mu                          sync.Mutex
	lastAccess                  authzv1.SubjectAccessReviewSpec
}

// clientset is a fake clientset answering as s does.
func (s *apiServer) clientset() *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s.tokenReviews.Add(1)
		if s.entered != nil {
			s.entered <- struct{}{}
		}
		if s.release != nil {
			<-s.release
		}
		if err := s.fail.Load(); err != nil {
			return true, nil, *err
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
		u, ok := s.users[tr.Spec.Token]
		tr.Status = authnv1.TokenReviewStatus{Authenticated: ok, User: u, Audiences: s.audiences}
		if !ok {
			tr.Status.Error = "[invalid bearer token]"
		}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s.accessReviews.Add(1)
		if err := s.fail.Load(); err != nil {
			return true, nil, *err
		}
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview).DeepCopy()
		s.mu.Lock()
		s.lastAccess = sar.Spec
		s.mu.Unlock()
		sar.Status.Allowed = s.allowed[sar.Spec.User]
		if !sar.Status.Allowed {
			sar.Status.Reason = "no RBAC policy matched"
		}
		return true, sar, nil
	})
	return cs
}

// newAPIServer knows two tokens: prometheus's, whose user may get /metrics, and nobody's,
// whose user may not.
func newAPIServer() *apiServer {
	return &apiServer{
		users: map[string]authnv1.UserInfo{
			"prometheus-token": {Username: "system:serviceaccount:monitoring:prometheus", UID: "uid-1",
				Groups: []string{"system:serviceaccounts", "system:authenticated"},
				Extra:  map[string]authnv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"prometheus-0"}}},
			"nobody-token": {Username: "system:serviceaccount:default:nobody", Groups: []string{"system:authenticated"}},
		},
		allowed: map[string]bool{"system:serviceaccount:monitoring:prometheus": true},
	}
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var quiet = slog.New(slog.DiscardHandler)

// serve starts an Exporter judged by rev over loopback and returns its /metrics URL.
func serve(t *testing.T, rev *metricsauth.Reviewer) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "usher_test_total", Help: "A test counter."})
	c.Inc()
	reg.MustRegister(c)
	exp, err := metrics.NewExporter(metrics.ExporterOptions{Gatherer: reg, Authenticate: rev.Authenticate, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(exp)
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

// scrape GETs url with a bearer token ("" for none) and returns the status.
func scrape(t *testing.T, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestExporter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		token  string
		fail   bool
		status int
		calls  [2]int64 // TokenReviews, SubjectAccessReviews
	}{
		{"allowed", "prometheus-token", false, 200, [2]int64{1, 1}},
		{"unauthenticated", "guess", false, 401, [2]int64{1, 0}},
		{"unauthorised", "nobody-token", false, 401, [2]int64{1, 1}},
		{"no token", "", false, 401, [2]int64{0, 0}},
		{"API error", "prometheus-token", true, 503, [2]int64{1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newAPIServer()
			if tc.fail {
				err := errors.New("connection refused")
				api.fail.Store(&err)
			}
			rev, err := metricsauth.New(metricsauth.Options{Client: api.clientset(), Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			if got := scrape(t, serve(t, rev), tc.token); got != tc.status {
				t.Errorf("status %d, want %d", got, tc.status)
			}
			if got := [2]int64{api.tokenReviews.Load(), api.accessReviews.Load()}; got != tc.calls {
				t.Errorf("reviews (token, access) = %v, want %v", got, tc.calls)
			}
		})
	}
}

// The SubjectAccessReview asks about the reviewed user (name, uid, groups, extra) getting
// the non-resource path.
func TestAccessReviewSpec(t *testing.T) {
	api := newAPIServer()
	rev, err := metricsauth.New(metricsauth.Options{Client: api.clientset(), Logger: quiet, Path: "/metrics/usher"})
	if err != nil {
		t.Fatal(err)
	}
	if got := scrape(t, serve(t, rev), "prometheus-token"); got != 200 {
		t.Fatalf("status %d, want 200", got)
	}
	want := authzv1.SubjectAccessReviewSpec{
		User: "system:serviceaccount:monitoring:prometheus", UID: "uid-1",
		Groups:                []string{"system:serviceaccounts", "system:authenticated"},
		Extra:                 map[string]authzv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"prometheus-0"}},
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: "/metrics/usher", Verb: "get"},
	}
	api.mu.Lock()
	got := api.lastAccess
	api.mu.Unlock()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("SubjectAccessReview spec\n got %+v\nwant %+v", got, want)
	}
}

func TestAudiences(t *testing.T) {
	for _, tc := range []struct {
		reviewed []string
		status   int
	}{{nil, 401}, {[]string{"other"}, 401}, {[]string{"other", "usher"}, 200}} {
		api := newAPIServer()
		api.audiences = tc.reviewed
		rev, err := metricsauth.New(metricsauth.Options{Client: api.clientset(), Logger: quiet, Audiences: []string{"usher"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := scrape(t, serve(t, rev), "prometheus-token"); got != tc.status {
			t.Errorf("reviewed audiences %q: status %d, want %d", tc.reviewed, got, tc.status)
		}
	}
}

// Judgments are cached, the allowed for AllowTTL and the refused for DenyTTL, by the
// injected clock; failures are not.
func TestCache(t *testing.T) {
	api := newAPIServer()
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	rev, err := metricsauth.New(metricsauth.Options{Client: api.clientset(), Logger: quiet, Now: clk.Now,
		AllowTTL: time.Minute, DenyTTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, rev)
	failure := errors.New("etcdserver: request timed out")
	for i, step := range []struct {
		advance time.Duration
		token   string
		fail    bool
		status  int
		reviews int64 // TokenReviews so far
	}{
		{0, "prometheus-token", false, 200, 1},
		{30 * time.Second, "prometheus-token", false, 200, 1}, // cached
		{0, "guess", false, 401, 2},                           // refused
		{9 * time.Second, "guess", false, 401, 2},             // cached 10 s
		{time.Second, "guess", false, 401, 3},                 // expired: asked again
		{20 * time.Second, "prometheus-token", false, 200, 4}, // 60 s: expired
		{0, "nobody-token", true, 503, 5},                     // a failure ...
		{0, "nobody-token", false, 401, 6},                    // ... is not cached
		{5 * time.Second, "prometheus-token", false, 200, 6},  // cached again
		{54 * time.Second, "prometheus-token", false, 200, 6}, // still: 59 s after its review
		{2 * time.Second, "prometheus-token", true, 503, 7},   // expired, and the API fails
		{0, "prometheus-token", false, 200, 8},                // recovered
	} {
		clk.Add(step.advance)
		if step.fail {
			api.fail.Store(&failure)
		} else {
			api.fail.Store(nil)
		}
		if got := scrape(t, url, step.token); got != step.status {
			t.Errorf("step %d (%s): status %d, want %d", i, step.token, got, step.status)
		}
		if got := api.tokenReviews.Load(); got != step.reviews {
			t.Errorf("step %d (%s): %d TokenReviews, want %d", i, step.token, got, step.reviews)
		}
	}
}

// The cache holds MaxEntries judgments and evicts the least recently used.
func TestCacheBound(t *testing.T) {
	api := newAPIServer()
	for _, tok := range []string{"a", "b", "c"} {
		api.users[tok] = authnv1.UserInfo{Username: "system:serviceaccount:monitoring:prometheus"}
	}
	rev, err := metricsauth.New(metricsauth.Options{Client: api.clientset(), Logger: quiet, MaxEntries: 2})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, rev)
	for i, step := range []struct {
		token   string
		reviews int64
	}{
		{"a", 1}, {"b", 2}, {"a", 2}, // a is now the most recently used
		{"c", 3},           // evicts b
		{"a", 3}, {"c", 3}, // kept
		{"b", 4}, // asked again; evicts a
		{"a", 5},
	} {
		if got := scrape(t, url, step.token); got != 200 {
			t.Errorf("step %d (%s): status %d", i, step.token, got)
		}
		if got := api.tokenReviews.Load(); got != step.reviews {
			t.Errorf("step %d (%s): %d TokenReviews, want %d", i, step.token, got, step.reviews)
		}
	}
}

// Scrapes that bring one token at once share one look-up; one that leaves while waiting gets
// its context's error, and the look-up goes on for the others.
func TestConcurrentLookups(t *testing.T) {
	api := newAPIServer()
	api.release = make(chan struct{})
	api.entered = make(chan struct{}, 1)
	rev, err := metricsauth.New(metricsauth.Options{Client: api.clientset(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	req := func(ctx context.Context) *http.Request {
		r, _ := http.NewRequestWithContext(ctx, http.MethodGet, "/metrics", nil)
		return r
	}
	const n = 16
	var wg sync.WaitGroup
	results := make(chan error, n)
	// The first holds the look-up (blocked in its TokenReview) ...
	wg.Go(func() {
		ok, err := rev.Authenticate(req(context.Background()), "prometheus-token")
		if !ok || err != nil {
			err = errors.Join(errors.New("refused"), err)
		}
		results <- err
	})
	<-api.entered
	// ... one that has left gets its context's error at once ...
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if ok, err := rev.Authenticate(req(gone), "prometheus-token"); ok || !errors.Is(err, context.Canceled) {
		t.Errorf("a scrape that left: %v, %v; want false, context.Canceled", ok, err)
	}
	// ... the others wait for it (or, if they come after, find it cached).
	for range n - 1 {
		wg.Go(func() {
			ok, err := rev.Authenticate(req(context.Background()), "prometheus-token")
			if !ok || err != nil {
				err = errors.Join(errors.New("refused"), err)
			}
			results <- err
		})
	}
	close(api.release)
	wg.Wait()
	close(results)
	for err := range results {
		if err != nil {
			t.Error(err)
		}
	}
	if got := api.tokenReviews.Load(); got != 1 {
		t.Errorf("%d TokenReviews for %d scrapes of one token, want 1", got, n)
	}
	if got := api.accessReviews.Load(); got != 1 {
		t.Errorf("%d SubjectAccessReviews, want 1", got)
	}
}

func TestNewErrors(t *testing.T) {
	cs := fake.NewClientset()
	for _, o := range []metricsauth.Options{
		{},
		{Client: cs, AllowTTL: -time.Second},
		{Client: cs, DenyTTL: -time.Second},
		{Client: cs, Timeout: -time.Second},
		{Client: cs, MaxEntries: -1},
		{Client: cs, Path: "metrics"},
	} {
		if _, err := metricsauth.New(o); !errors.Is(err, metricsauth.ErrInvalidOptions) {
			t.Errorf("New(%+v): %v, want ErrInvalidOptions", o, err)
		}
	}
	if _, err := metricsauth.Connect("/does/not/exist"); err == nil {
		t.Error("Connect of a missing kubeconfig succeeded")
	}
}
