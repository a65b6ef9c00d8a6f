package metricsauth

import (
	"cmp"
	"container/list"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ErrInvalidOptions is wrapped by New's errors.
var ErrInvalidOptions = errors.New("metricsauth: invalid options")

// Defaults of Options' zero values (see the package doc for the TTLs' reasons).
const (
	defaultPath       = "/metrics"
	defaultAllowTTL   = time.Minute
	defaultDenyTTL    = 10 * time.Second
	defaultMaxEntries = 1024
	defaultTimeout    = 5 * time.Second
)

// Options configure a [Reviewer]. Client is required; the zero value of every other field is a
// documented default.
type Options struct {
	// Client reaches the API server: [Connect]'s, or a fake clientset in tests. The Reviewer
	// creates TokenReviews and SubjectAccessReviews through it.
	Client kubernetes.Interface
	// Audiences, if set, are the audiences a token must be meant for (the TokenReview's
	// spec.audiences; a token whose reviewed audiences hold none of them is refused). Empty:
	// the API server's own audiences, as for a service-account token a pod mounts.
	Audiences []string
	// Path is the non-resource URL the token's user must be allowed to get (the
	// SubjectAccessReview's nonResourceAttributes, verb get — for HEAD too). Empty: /metrics.
	Path string
	// AllowTTL is how long an allowed token is trusted without asking again; zero: one minute.
	// DenyTTL is the same for a refused one; zero: 10 s.
	AllowTTL, DenyTTL time.Duration
	// MaxEntries bounds the judgments cached; the least recently used goes first. Zero: 1024.
	MaxEntries int
	// Timeout bounds each call to the API server; zero: 5 s.
	Timeout time.Duration
	// Logger receives refusals of authenticated users (their names, never a token) at Info
	// and of unknown tokens at Debug. Nil: slog.Default().
	Logger *slog.Logger
	// Now is the clock of the TTLs. Nil: time.Now.
	Now func() time.Time
}

// Reviewer judges bearer tokens by a TokenReview and a SubjectAccessReview, with the results
// cached by the token's SHA-256 digest (see the package doc). Its Authenticate method is a
// judge for metrics.ExporterOptions.Authenticate:
//
//	rev, err := metricsauth.New(metricsauth.Options{Client: client})
//	exp, err := metrics.NewExporter(metrics.ExporterOptions{Gatherer: reg, Authenticate: rev.Authenticate})
//
// A Reviewer is safe for concurrent use. A judgment in the cache costs a digest and a map
// look-up under one mutex, O(1); otherwise two API calls, shared by every request that brings
// the same token meanwhile.
type Reviewer struct {
	client    kubernetes.Interface
	audiences []string
	path      string
	allowTTL  time.Duration
	denyTTL   time.Duration
	max       int
	timeout   time.Duration
	log       *slog.Logger
	now       func() time.Time

	mu      sync.Mutex // guards the fields below
	entries map[[sha256.Size]byte]*list.Element
	lru     list.List // of *entry; front: most recently used
	calls   map[[sha256.Size]byte]*call
}

// entry is a cached judgment.
type entry struct {
	key     [sha256.Size]byte
	allowed bool
	expires time.Time
}

// call is a look-up in flight; done closes when allowed and err are set.
type call struct {
	done    chan struct{}
	allowed bool
	err     error
}

// New validates o and returns a Reviewer. It makes no request.
func New(o Options) (*Reviewer, error) {
	switch {
	case o.Client == nil:
		return nil, fmt.Errorf("%w: Client is nil", ErrInvalidOptions)
	case o.AllowTTL < 0 || o.DenyTTL < 0 || o.Timeout < 0 || o.MaxEntries < 0:
		return nil, fmt.Errorf("%w: negative AllowTTL, DenyTTL, Timeout or MaxEntries", ErrInvalidOptions)
	case o.Path != "" && o.Path[0] != '/':
		return nil, fmt.Errorf("%w: Path %q does not start with /", ErrInvalidOptions, o.Path)
	}
	v := &Reviewer{
		client:    o.Client,
		audiences: slices.Clone(o.Audiences),
		path:      cmp.Or(o.Path, defaultPath),
		allowTTL:  cmp.Or(o.AllowTTL, defaultAllowTTL),
		denyTTL:   cmp.Or(o.DenyTTL, defaultDenyTTL),
		max:       cmp.Or(o.MaxEntries, defaultMaxEntries),
		timeout:   cmp.Or(o.Timeout, defaultTimeout),
		log:       o.Logger,
		now:       o.Now,
		entries:   map[[sha256.Size]byte]*list.Element{},
		calls:     map[[sha256.Size]byte]*call{},
	}
	if v.log == nil {
		v.log = slog.Default()
	}
	if v.now == nil {
		v.now = time.Now
	}
	return v, nil
}

// Authenticate reports whether token's user may get Options.Path: true if the API server
// authenticates the token and authorises its user, false if it does not (either), an error if
// it could not be asked or failed (not cached). Its signature is
// metrics.ExporterOptions.Authenticate's; r serves only for its context.
//
// Without a cached judgment it blocks: the first request for a token asks the API server
// (two calls, each at most Options.Timeout, not cut short by r's context, since others may
// wait for the answer); one that finds that look-up running waits for it, or returns r's
// context's error when that ends first.
func (v *Reviewer) Authenticate(r *http.Request, token string) (bool, error) {
	ctx := r.Context()
	key := sha256.Sum256([]byte(token))
	v.mu.Lock()
	if allowed, ok := v.cachedLocked(key, v.now()); ok {
		v.mu.Unlock()
		return allowed, nil
	}
	if c, ok := v.calls[key]; ok {
		v.mu.Unlock()
		select {
		case <-c.done:
			return c.allowed, c.err
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	c := &call{done: make(chan struct{})}
	v.calls[key] = c
	v.mu.Unlock()

	defer func() {
		v.mu.Lock()
		delete(v.calls, key)
		if c.err == nil {
			v.storeLocked(key, c.allowed, v.now())
		}
		v.mu.Unlock()
		close(c.done)
	}()
	// Not cancelled by this scraper's leaving: others may be waiting for the answer.
	c.allowed, c.err = v.review(context.WithoutCancel(ctx), token)
	return c.allowed, c.err
}

// cachedLocked returns key's judgment if it has not expired at now, and marks it used; an
// expired one is dropped. O(1).
func (v *Reviewer) cachedLocked(key [sha256.Size]byte, now time.Time) (allowed, ok bool) {
	el, ok := v.entries[key]
	if !ok {
		return false, false
	}
	e := el.Value.(*entry)
	if !now.Before(e.expires) {
		v.lru.Remove(el)
		delete(v.entries, key)
		return false, false
	}
	v.lru.MoveToFront(el)
	return e.allowed, true
}

// storeLocked caches a judgment made at now, evicting the least recently used one when the
// cache is full. O(1).
func (v *Reviewer) storeLocked(key [sha256.Size]byte, allowed bool, now time.Time) {
	ttl := v.denyTTL
	if allowed {
		ttl = v.allowTTL
	}
	if el, ok := v.entries[key]; ok {
		e := el.Value.(*entry)
		e.allowed, e.expires = allowed, now.Add(ttl)
		v.lru.MoveToFront(el)
		return
	}
	if v.lru.Len() >= v.max {
		oldest := v.lru.Back()
		v.lru.Remove(oldest)
		delete(v.entries, oldest.Value.(*entry).key)
	}
	v.entries[key] = v.lru.PushFront(&entry{key: key, allowed: allowed, expires: now.Add(ttl)})
}

// review asks the API server: who is token, and may they get the path?
func (v *Reviewer) review(ctx context.Context, token string) (bool, error) {
	tctx, cancel := context.WithTimeout(ctx, v.timeout)
	tr, err := v.client.AuthenticationV1().TokenReviews().Create(tctx,
		&authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: v.audiences}}, metav1.CreateOptions{})
	cancel()
	if err != nil {
		return false, fmt.Errorf("metricsauth: TokenReview: %w", err)
	}
	// An invalid or expired token comes back unauthenticated with an error text: a refusal,
	// not a failure to judge.
	if !tr.Status.Authenticated {
		v.log.Debug("metrics: a bearer token is not authenticated", "reason", tr.Status.Error)
		return false, nil
	}
	if len(v.audiences) > 0 && !slices.ContainsFunc(tr.Status.Audiences, func(a string) bool { return slices.Contains(v.audiences, a) }) {
		v.log.Debug("metrics: a bearer token is not meant for this audience", "user", tr.Status.User.Username)
		return false, nil
	}
	u := tr.Status.User
	var extra map[string]authzv1.ExtraValue
	if len(u.Extra) > 0 {
		extra = make(map[string]authzv1.ExtraValue, len(u.Extra))
		for k, vals := range u.Extra {
			extra[k] = authzv1.ExtraValue(slices.Clone(vals))
		}
	}
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, Groups: u.Groups, UID: u.UID, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: v.path, Verb: "get"},
	}}
	actx, cancel := context.WithTimeout(ctx, v.timeout)
	sar, err = v.client.AuthorizationV1().SubjectAccessReviews().Create(actx, sar, metav1.CreateOptions{})
	cancel()
	if err != nil {
		return false, fmt.Errorf("metricsauth: SubjectAccessReview: %w", err)
	}
	if !sar.Status.Allowed || sar.Status.Denied {
		v.log.Info("metrics: a scraper's user may not get "+v.path, "user", u.Username, "reason", sar.Status.Reason)
		return false, nil
	}
	return true, nil
}

// Connect builds a clientset from a kubeconfig file, or from the pod's service account when
// kubeconfig is empty (in-cluster). It makes no request.
func Connect(kubeconfig string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("metricsauth: kubernetes config: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "usher-metricsauth"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("metricsauth: %w", err)
	}
	return c, nil
}
