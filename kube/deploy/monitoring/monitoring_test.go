package monitoring

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/gateway/replicaext"
	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/internal/kvpub"
	"github.com/usher-llm/usher/kube/inferencepool"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/extproc"
	"github.com/usher-llm/usher/proxy/kvfeed"
	"github.com/usher-llm/usher/proxy/quota"
	"github.com/usher-llm/usher/replica"
)

const (
	dashboardFile = "usher-dashboard.json"
	alertsFile    = "usher-alerts.yaml"
)

// exports is what a gateway's GET /metrics serves.
type exports struct {
	series   map[string]bool            // series names
	families []string                   // usher's own families
	values   map[string]map[string]bool // label name to the values usher_ series have
}

// exported returns what a gateway's and an endpoint picker's GET /metrics serve, gathered
// from the registry of a proxy.Handler over two simulated servers, the first publishing KV
// events that a kvfeed follows, with a replica attached, and from the registry of an
// extproc.Server with an InferencePool watch's collector, as examples/epp builds it. Nothing is run: building the Handler registers every
// collector, and no collector needs traffic to export its families (the replica's Redis client
// is never called).
func exported(t *testing.T) exports {
	t.Helper()
	pub, err := kvpub.New(kvpub.Options{Endpoint: "tcp://127.0.0.1:0", Topic: kvpub.Topic("pod-a", "usher/demo")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{Servers: 2, Configure: func(i int, o *simfleet.Options) {
		if i == 0 {
			o.OnKVEvents = simfleet.PublishKVEvents(pub, nil)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { rdb.Close() })
	rep, err := replica.New(replica.Options{ID: "monitoring-test", Client: rdb})
	if err != nil {
		t.Fatal(err)
	}
	feed, err := kvfeed.New(kvfeed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	urls := fleet.URLs()
	limiter, err := quota.New(quota.Options{Limits: []quota.Limit{{Window: time.Minute, Requests: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := proxy.New(proxy.Options{
		Backends:   []proxy.Backend{{URL: urls[0], KVEvents: pub.Endpoint()}, {URL: urls[1], KVBoth: true}},
		Tokenizer:  simfleet.Tokenizer{},
		Extensions: []proxy.Extension{feed, replicaext.Wrap(rep)},
		Quota:      limiter,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)

	// The endpoint picker's registry as examples/epp builds it: extproc's collectors and the
	// InferencePool watch's (on a fake API server; nothing is run).
	picker, err := extproc.New(extproc.Options{Endpoints: []extproc.Endpoint{{Address: "127.0.0.1:1"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(picker.Close)
	src, err := inferencepool.New(inferencepool.Options{Name: "pool", Namespace: "ns", Clients: inferencepool.Clients{
		Pods: fake.NewClientset(),
		Pools: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{inferencepool.GroupVersionResource: "InferencePoolList"}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	picker.Registry().MustRegister(src.Collector())

	var families []*dto.MetricFamily
	var descs []*prometheus.Desc
	for _, reg := range []*prometheus.Registry{h.Registry(), picker.Registry()} {
		fs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		families = append(families, fs...)
		ch := make(chan *prometheus.Desc)
		go func() { reg.Describe(ch); close(ch) }()
		for d := range ch {
			descs = append(descs, d)
		}
	}
	e := exports{series: map[string]bool{}, values: map[string]map[string]bool{}}
	series := e.series
	gathered := make(map[string]bool)
	for _, f := range families {
		name := f.GetName()
		if strings.HasPrefix(name, "usher_") && !gathered[name] {
			e.families = append(e.families, name)
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if e.values[l.GetName()] == nil {
						e.values[l.GetName()] = map[string]bool{}
					}
					e.values[l.GetName()][l.GetValue()] = true
				}
			}
		}
		gathered[name] = true
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			series[name+"_bucket"], series[name+"_sum"], series[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			series[name], series[name+"_sum"], series[name+"_count"] = true, true, true
		default:
			series[name] = true
		}
	}
	// A family that is described but has no series yet (a vector without children) is not
	// gathered, and its type, hence its series names, would be unknown: usher's must all be
	// created at construction.
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, d := range descs {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in descriptor %s", d)
		}
		if strings.HasPrefix(m[1], "usher_") && !gathered[m[1]] {
			t.Errorf("%s is described but not gathered: create its series when its collector is built", m[1])
		}
	}
	// One family of each collector, so that a collector left out of the set-up is noticed.
	for _, want := range []string{"usher_admissions_total", "usher_pd_requests_total", "usher_scrapes_total",
		"usher_kvevents_events_total", "usher_replica_sync_connected", "usher_quota_requests_total", "go_goroutines", "process_cpu_seconds_total",
		"usher_epp_pool_connected", "usher_epp_pool_endpoints"} {
		if !gathered[want] {
			t.Errorf("the gateway's and the picker's registries have no %s", want)
		}
	}
	// Every admission outcome flowcontrol names may be configured into a gateway's outcome set.
	for o := flowcontrol.Outcome(1); o.String() != "none"; o++ {
		e.values["outcome"][o.String()] = true
	}
	return e
}

// An expr is one PromQL expression and where it comes from.
type expr struct {
	where, text string
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

// dashboardExprs reads the dashboard, checks its shape and returns its targets' expressions and
// its template variables' label_values queries (their first argument, a series selector).
func dashboardExprs(t *testing.T) (targets, variables []expr) {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: want >= 36", d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		sel, ok := strings.CutPrefix(q, "label_values(")
		i := strings.LastIndexByte(sel, ',')
		if !ok || i < 0 {
			t.Errorf("variable %s: query %q: want label_values(selector, label)", v.Name, q)
			continue
		}
		variables = append(variables, expr{"variable " + v.Name, sel[:i]})
	}
	for name, typ := range map[string]string{"datasource": "datasource", "job": "query", "instance": "query"} {
		if vars[name] != typ {
			t.Errorf("template variable %s has type %q: want %q", name, vars[name], typ)
		}
	}
	var rows []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				rows = append(rows, p.Title)
				walk(p.Panels)
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %d %q: datasource %+v: want the ${datasource} variable", p.ID, p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %d %q has no targets", p.ID, p.Title)
			}
			for _, tg := range p.Targets {
				targets = append(targets, expr{fmt.Sprintf("panel %d %q target %s", p.ID, p.Title, tg.RefID), tg.Expr})
			}
		}
	}
	walk(d.Panels)
	for _, want := range []string{"Admission", "Routing", "Prefix cache", "KV events", "Replicas", "Disaggregated prefill/decode", "Endpoint picker: InferencePool watch", "Go runtime and process"} {
		if !slices.Contains(rows, want) {
			t.Errorf("rows %q: want a row %q", rows, want)
		}
	}
	return targets, variables
}

// ruleFile is the part of a Prometheus rule file the test reads and writes.
type ruleFile struct {
	Groups []ruleGroup `yaml:"groups" json:"groups"`
}

type ruleGroup struct {
	Name  string `yaml:"name" json:"name"`
	Rules []rule `yaml:"rules" json:"rules"`
}

type rule struct {
	Alert       string            `yaml:"alert,omitempty" json:"alert,omitempty"`
	Record      string            `yaml:"record,omitempty" json:"record,omitempty"`
	Expr        string            `yaml:"expr" json:"expr"`
	For         string            `yaml:"for,omitempty" json:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty" json:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty" json:"annotations,omitempty"`
}

// alertExprs reads the alert rules, checks each has a severity, a summary and a description,
// and returns their expressions.
func alertExprs(t *testing.T) []expr {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var out []expr
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule without alert: want only alerting rules", g.Name)
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: want a severity label, a summary and a description", r.Alert)
			}
			out = append(out, expr{"alert " + r.Alert, r.Expr})
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no rules", alertsFile)
	}
	return out
}

// TestNamesExported checks that the dashboard and the alerts use only series the gateway or
// the endpoint picker exports, and that the dashboard shows every usher_ family of both.
func TestNamesExported(t *testing.T) {
	ex := exported(t)
	targets, variables := dashboardExprs(t)
	alerts := alertExprs(t)
	used := map[string]bool{}
	for _, e := range slices.Concat(targets, variables, alerts) {
		names, err := seriesNames(e.text)
		if err != nil {
			t.Errorf("%s: %v", e.where, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: %q names no series", e.where, e.text)
		}
		for _, n := range names {
			if !ex.series[n] {
				t.Errorf("%s uses %s, which the gateway does not export", e.where, n)
			}
			used[n] = true
		}
		for _, m := range labelMatchers(e.text) {
			if !closedLabels[m.name] {
				continue
			}
			vals := []string{m.value}
			if m.op == "=~" || m.op == "!~" {
				if !alternatives.MatchString(m.value) {
					t.Errorf("%s: %s%s%q: want alternatives of literal values for a closed label", e.where, m.name, m.op, m.value)
					continue
				}
				vals = strings.Split(m.value, "|")
			}
			for _, v := range vals {
				if !ex.values[m.name][v] {
					t.Errorf("%s: %s%s%q: %s has no value %q (it has %v)", e.where, m.name, m.op, m.value, m.name, v, slices.Sorted(maps.Keys(ex.values[m.name])))
				}
			}
		}
	}
	dashboardUses := map[string]bool{}
	for _, e := range targets {
		names, _ := seriesNames(e.text)
		for _, n := range names {
			dashboardUses[n] = true
		}
	}
	for _, f := range ex.families {
		if !dashboardUses[f] && !dashboardUses[f+"_bucket"] && !dashboardUses[f+"_sum"] && !dashboardUses[f+"_count"] {
			t.Errorf("the dashboard does not show %s", f)
		}
	}
	t.Logf("%d expressions use %d distinct series of the %d exported", len(targets)+len(variables)+len(alerts), len(used), len(ex.series))
}

// closedLabels are the labels of usher_ series whose values are a closed set, the same for
// every gateway: a matcher on one must name values that exist. (band, backend, source and
// replica depend on the configuration.)
var closedLabels = map[string]bool{
	"outcome": true, "decision": true, "result": true, "role": true, "reason": true, "kind": true, "direction": true,
}

// alternatives matches a regular expression that is a list of literal values: a|b|c.
var alternatives = regexp.MustCompile(`^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$`)

// A matcher is one label matcher of a selector: name op "value".
type matcher struct{ name, op, value string }

var matcherRE = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)

// labelMatchers returns the double-quoted label matchers of the selectors ({...}) in s, which
// seriesNames has found balanced. Values are returned as written (no unescaping; usher's
// closed label values need none). O(len(s)).
func labelMatchers(s string) []matcher {
	var out []matcher
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"', '\'', '`':
			end, err := skipString(s, i)
			if err != nil {
				return out
			}
			i = end - 1
		case '{':
			j := i + 1
			for j < len(s) && s[j] != '}' {
				if q := s[j]; q == '"' || q == '\'' || q == '`' {
					end, err := skipString(s, j)
					if err != nil {
						return out
					}
					j = end
					continue
				}
				j++
			}
			for _, m := range matcherRE.FindAllStringSubmatch(s[i:min(j, len(s))], -1) {
				out = append(out, matcher{m[1], m[2], m[3]})
			}
			i = j
		}
	}
	return out
}

// promtool returns promtool's path, skipping the test when it is missing unless
// USHER_REQUIRE_PROMTOOL=1.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("USHER_REQUIRE_PROMTOOL") == "1" {
			t.Fatalf("promtool not found and USHER_REQUIRE_PROMTOOL=1: install Debian's prometheus package")
		}
		t.Skip("promtool not found (Debian's prometheus package): expressions not parsed; set USHER_REQUIRE_PROMTOOL=1 to fail instead")
	}
	return p
}

// TestAlertRulesParse runs promtool check rules on the alert rules.
func TestAlertRulesParse(t *testing.T) {
	p := promtool(t)
	out, err := exec.Command(p, "check", "rules", alertsFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", alertsFile, err, out)
	}
	t.Logf("%s", out)
}

// grafanaVars are Grafana's interval variables and what the test puts in their place; any other
// $variable (the template variables, used in label matchers) becomes ".*".
var (
	grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "${__rate_interval}", "5m",
		"$__interval", "1m", "${__interval}", "1m", "$__range", "1h", "${__range}", "1h")
	templateVar = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)
)

// TestDashboardExprsParse writes the dashboard's expressions into a rule file as recording
// rules and runs promtool check rules on it: promtool parses a rule file offline, while
// promtool query needs a server.
func TestDashboardExprsParse(t *testing.T) {
	p := promtool(t)
	targets, _ := dashboardExprs(t)
	g := ruleGroup{Name: "usher-dashboard"}
	for i, e := range targets {
		text := templateVar.ReplaceAllString(grafanaVars.Replace(e.text), ".*")
		g.Rules = append(g.Rules, rule{Record: fmt.Sprintf("usher_dashboard:target_%d", i), Expr: text})
	}
	b, err := json.Marshal(ruleFile{Groups: []ruleGroup{g}}) // YAML is a superset of JSON
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(p, "check", "rules", file).CombinedOutput()
	if err != nil {
		t.Errorf("promtool check rules on the dashboard's expressions: %v\n%s", err, out)
		// promtool names a failing rule by its record name: map it back to the panel.
		for _, m := range regexp.MustCompile(`usher_dashboard:target_([0-9]+)`).FindAllStringSubmatch(string(out), -1) {
			if i, err := strconv.Atoi(m[1]); err == nil && i < len(targets) {
				t.Errorf("%s is %s: %s", m[0], targets[i].where, targets[i].text)
			}
		}
		return
	}
	if want := fmt.Sprintf("SUCCESS: %d rules found", len(targets)); !strings.Contains(string(out), want) {
		t.Errorf("promtool said %q: want %q", out, want)
	}
}

// keywords are PromQL words that are not series names where a name could stand: binary and
// set operators, modifiers, aggregation operators (also when by or without comes before their
// parentheses), and number literals.
var keywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true, "inf": true, "nan": true,
}

// labelLists are the words followed by a parenthesised list of label names.
var labelLists = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// seriesNames returns the metric names an expression selects, sorted and without repeats. It
// skips string literals, comments, label matchers ({...}), ranges and subqueries ([...]),
// numbers and durations, keywords, label lists, and words followed by '(' (functions). It
// checks brackets balance; the rest of the grammar is promtool's to check. O(len(s)).
func seriesNames(s string) ([]string, error) {
	var names []string
	i := 0
	// skipTo returns the index just past the bracket closing the one at i, skipping strings.
	skipTo := func(i int, open, close byte) (int, error) {
		depth := 0
		for j := i; j < len(s); j++ {
			switch c := s[j]; c {
			case '"', '\'', '`':
				end, err := skipString(s, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case open:
				depth++
			case close:
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("unbalanced %c at offset %d", open, i)
	}
	nextNonSpace := func(i int) int {
		for i < len(s) && strings.IndexByte(" \t\r\n", s[i]) >= 0 {
			i++
		}
		return i
	}
	var err error
	for i < len(s) {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			if i, err = skipString(s, i); err != nil {
				return nil, err
			}
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '{':
			if i, err = skipTo(i, '{', '}'); err != nil {
				return nil, err
			}
		case c == '[':
			if i, err = skipTo(i, '[', ']'); err != nil {
				return nil, err
			}
		case c >= '0' && c <= '9' || c == '.':
			for i < len(s) && (isIdent(s[i]) || s[i] == '.') {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			word := s[i:j]
			i = nextNonSpace(j)
			switch {
			case labelLists[word]:
				if i < len(s) && s[i] == '(' {
					if i, err = skipTo(i, '(', ')'); err != nil {
						return nil, err
					}
				}
			case keywords[strings.ToLower(word)]:
			case i < len(s) && s[i] == '(':
				// A function; its arguments are read on.
			default:
				names = append(names, word)
			}
		default:
			i++
		}
	}
	sort.Strings(names)
	return slices.Compact(names), nil
}

// skipString returns the index just past the string literal that starts at i.
func skipString(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string at offset %d", i)
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func isIdent(c byte) bool { return isIdentStart(c) || '0' <= c && c <= '9' }

// TestSeriesNames checks the tokenizer on the forms the dashboard and the alerts use.
func TestSeriesNames(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{`up`, []string{"up"}},
		{`rate(a_total{job=~"$job", x="sum(b)"}[$__rate_interval])`, []string{"a_total"}},
		{`histogram_quantile(0.99, sum by (band, le) (rate(w_bucket{outcome="dispatched"}[5m])))`, []string{"w_bucket"}},
		{`sum(rate(a[5m])) by (instance) / ignoring (x) group_left (y) b offset 1h > bool 0.5`, []string{"a", "b"}},
		{`a * on (job, instance, backend) (1 - b) and c unless d or e`, []string{"a", "b", "c", "d", "e"}},
		{`time() - max by (s) (ts > 0) # comment naming nothing`, []string{"ts"}},
		{`max_over_time(a[1h:5m]) + Inf - 1e3 + 0x1f + count(b) + topk(3, c)`, []string{"a", "b", "c"}},
		{`a:recorded:rate5m{l='it\'s}'} + "x\"y" + ` + "`z\\`", []string{"a:recorded:rate5m"}},
		{`label_values(q_total{job=~"$job"}`, []string{"q_total"}},
	} {
		got, err := seriesNames(tc.in)
		if err != nil {
			t.Errorf("seriesNames(%q): %v", tc.in, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("seriesNames(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, bad := range []string{`rate(a[5m)`, `a{x="y"`, `a{x="y}`} {
		if got, err := seriesNames(bad); err == nil {
			t.Errorf("seriesNames(%q) = %q, nil: want an error", bad, got)
		}
	}
}

// TestLabelMatchers checks the matcher extraction the label-value check relies on.
func TestLabelMatchers(t *testing.T) {
	got := labelMatchers(`rate(a{x="1", y=~"b|c", z!="{\"}"}[5m]) / b{w!~'q'} + "k=\"v\"" + c{ outcome = "expired" }`)
	want := []matcher{{"x", "=", "1"}, {"y", "=~", "b|c"}, {"z", "!=", `{\"}`}, {"outcome", "=", "expired"}}
	if !slices.Equal(got, want) {
		t.Errorf("labelMatchers = %q, want %q", got, want)
	}
}

// TestPickerPoolAlerts checks that the picker's pool watch is alerted on: a missing pool, a
// watch cut from the API server, an empty pool and failing calls each have a rule.
func TestPickerPoolAlerts(t *testing.T) {
	uses := map[string]bool{}
	for _, e := range alertExprs(t) {
		names, err := seriesNames(e.text)
		if err != nil {
			t.Fatalf("%s: %v", e.where, err)
		}
		for _, n := range names {
			uses[n] = true
		}
	}
	for _, want := range []string{"usher_epp_pool_found", "usher_epp_pool_connected", "usher_epp_pool_endpoints", "usher_epp_pool_sync_errors_total"} {
		if !uses[want] {
			t.Errorf("no alert uses %s", want)
		}
	}
}
