package extproc

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/proxy/openai"
)

// The names of the Gateway API Inference Extension's endpoint picker protocol.
const (
	// DestinationHeader is the request header the picker sets to the chosen endpoint
	// ("ip:port", or "ip:port,ip:port,..." with fallbacks), and also the key of the same
	// value in the dynamic metadata namespace MetadataNamespace.
	DestinationHeader = "x-gateway-destination-endpoint"
	// PrefillerHeader names the prefill endpoint (ip:port) of a disaggregated request, for
	// the routing sidecar on the decode pod (llm-d's), which sends the prefill step there and
	// then the decode step to its own server. The picker removes a client's.
	PrefillerHeader = "x-prefiller-host-port"
	// MetadataNamespace is the dynamic-metadata namespace of the destination, and the
	// filter-metadata namespace in which Envoy reports the endpoint that served.
	MetadataNamespace = "envoy.lb"
	// SubsetNamespace is the filter-metadata namespace of the proxy's subset hint.
	SubsetNamespace = "envoy.lb.subset_hint"
	// SubsetKey is the key, in SubsetNamespace, of the list of endpoints the picker must
	// choose from.
	SubsetKey = "x-gateway-destination-endpoint-subset"
	// ServedKey is the key (in MetadataNamespace of the response's metadata context) and
	// the response header naming the endpoint that really served the request.
	ServedKey = "x-gateway-destination-endpoint-served"
)

// Health service names the gRPC health service reports, besides "" (the whole server).
const (
	// HealthLiveness is SERVING while the process answers.
	HealthLiveness = "liveness"
	// HealthReadiness is SERVING once the endpoints have synced — at New without
	// Options.Source, at the Source's first set with one — even when there are none (each
	// request is then answered 503 with Retry-After), and NOT_SERVING after Close and while
	// on standby (Server.SetStandby).
	HealthReadiness = "readiness"
	// HealthExtProc is the ext_proc service's own name; SERVING like HealthReadiness.
	HealthExtProc = "envoy.service.ext_proc.v3.ExternalProcessor"
	// HealthInferenceExtension is the name the Gateway API Inference Extension's reference
	// picker and its probes use (on its health port, 9003); SERVING like HealthReadiness,
	// so those probes work unchanged (see Server.RegisterHealth).
	HealthInferenceExtension = "inference-extension"
)

// headerValue returns the value of a header as Envoy sends it: raw_value when set (Envoy
// sends header values as bytes), value otherwise.
func headerValue(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

// setHeader is a header mutation entry that overwrites (or adds) key.
func setHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// destinationMetadata is the dynamic metadata naming the destination:
// {namespace: {DestinationHeader: value}}.
func destinationMetadata(namespace, value string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		namespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			DestinationHeader: structpb.NewStringValue(value),
		}}),
	}}
}

// metadataField returns the value of key in the filter-metadata namespace ns of md, or nil.
func metadataField(md *corev3.Metadata, ns, key string) *structpb.Value {
	s := md.GetFilterMetadata()[ns]
	if s == nil {
		return nil
	}
	return s.GetFields()[key]
}

// maxSubset bounds the endpoints a subset hint may list; the rest are ignored.
const maxSubset = 4096

// subsetOf reads a subset hint: a list of "ip:port" strings (the protocol's form) or one
// comma-separated string. ok is false when the hint is absent. Entries that are not strings
// are skipped, so a malformed hint is an empty subset (503), never a panic.
func subsetOf(v *structpb.Value) (subset []string, ok bool) {
	if v == nil {
		return nil, false
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			if len(subset) == maxSubset {
				break
			}
			if s, isStr := e.GetKind().(*structpb.Value_StringValue); isStr {
				subset = appendEndpoints(subset, s.StringValue)
			}
		}
	case *structpb.Value_StringValue:
		subset = appendEndpoints(subset, k.StringValue)
	}
	return subset, true
}

// appendEndpoints appends the non-empty, trimmed entries of a comma-separated list.
func appendEndpoints(dst []string, list string) []string {
	for part := range strings.SplitSeq(list, ",") {
		if len(dst) == maxSubset {
			break
		}
		if p := strings.TrimSpace(part); p != "" {
			dst = append(dst, p)
		}
	}
	return dst
}

// firstEndpoint returns the first entry of a comma-separated endpoint list.
func firstEndpoint(list string) string {
	first, _, _ := strings.Cut(list, ",")
	return strings.TrimSpace(first)
}

// immediate is the ImmediateResponse that answers the client with e, as the error JSON of
// ep's API (Anthropic's for Messages, OpenAI's otherwise); retryAfter > 0 adds a
// Retry-After header (whole seconds, rounded up).
func immediate(ep openai.API, e *openai.Error, retryAfter time.Duration) *extprocv3.ProcessingResponse {
	status := e.Status
	if status < 100 || status > 999 {
		status = http.StatusInternalServerError
	}
	body := append(openaiwire.AppendJSONFor(e, ep, make([]byte, 0, 128+len(e.Message))), '\n')
	set := []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}
	if retryAfter > 0 {
		set = append(set, setHeader("retry-after", strconv.Itoa(int(math.Ceil(retryAfter.Seconds())))))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(status)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: set},
			Body:    body,
			Details: "usher_" + e.Code,
		},
	}}
}

// Canned responses: continue without changes.
func continueRequestHeaders() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}}
}

func continueRequestBody() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}
}

func continueRequestTrailers() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
}

func continueResponseHeaders() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}
}

func continueResponseTrailers() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
}

// responseBody answers one response body chunk: CONTINUE, or in full-duplex mode the chunk
// itself, which Envoy then forwards (the picker must hand every byte back).
func responseBody(chunk []byte, eos, duplex bool) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{}
	if duplex {
		br.Response = &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
			Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: chunk, EndOfStream: eos}},
		}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
}
