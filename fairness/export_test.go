package fairness

import (
	"time"

	"github.com/usher-llm/usher/flowcontrol"
)

// Service is a LAS policy's decayed service of a flow in a band, for the tests.
func Service(p flowcontrol.Policy, id flowcontrol.FlowID, band int, now time.Time) (float64, bool) {
	switch p := p.(type) {
	case *lasPolicy:
		return p.Service(id, band, now)
	case *lasReference:
		return p.Service(id, band, now)
	}
	return 0, false
}

// Counter is a VTC policy's counter of a flow in a band, for the tests.
func Counter(p flowcontrol.Policy, id flowcontrol.FlowID, band int) (float64, bool) {
	if p, ok := p.(*vtcPolicy); ok {
		return p.Counter(id, band)
	}
	return 0, false
}

// TenantBeforeSlash is the default HierarchyOptions.Tenant.
func TenantBeforeSlash(id flowcontrol.FlowID) flowcontrol.FlowID { return tenantBeforeSlash(id) }

// LASReferenceOptions configures NewLASReference.
type LASReferenceOptions = lasReferenceOptions

// NewLASReference returns llm-d's LAS (see lasReference), or an error wrapping
// ErrInvalidOptions.
func NewLASReference(o LASReferenceOptions) (flowcontrol.Policy, error) {
	p, err := newLASReference(o)
	if err != nil {
		return nil, err
	}
	return p, nil
}
