package gateway

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// The assertions these tests use, each reporting with t.Errorf and returning whether it held,
// so that the library's go.mod carries no test-only assertion module.

func report(t *testing.T, what string, msg []any) bool {
	t.Helper()
	if len(msg) > 0 {
		if f, ok := msg[0].(string); ok {
			what = fmt.Sprintf(f, msg[1:]...) + ": " + what
		} else {
			what = fmt.Sprint(msg...) + ": " + what
		}
	}
	t.Error(what)
	return false
}

func noError(t *testing.T, err error, msg ...any) bool {
	t.Helper()
	if err != nil {
		return report(t, fmt.Sprintf("unexpected error: %v", err), msg)
	}
	return true
}

func isError(t *testing.T, err error, msg ...any) bool {
	t.Helper()
	if err == nil {
		return report(t, "no error", msg)
	}
	return true
}

func errorIs(t *testing.T, err, target error, msg ...any) bool {
	t.Helper()
	if !errors.Is(err, target) {
		return report(t, fmt.Sprintf("error %v, want %v", err, target), msg)
	}
	return true
}

func equal(t *testing.T, want, got any, msg ...any) bool {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		return report(t, fmt.Sprintf("got %#v, want %#v", got, want), msg)
	}
	return true
}

func isTrue(t *testing.T, ok bool, msg ...any) bool {
	t.Helper()
	if !ok {
		return report(t, "false, want true", msg)
	}
	return true
}

func contains(t *testing.T, s, sub string, msg ...any) bool {
	t.Helper()
	if !strings.Contains(s, sub) {
		return report(t, fmt.Sprintf("%q does not contain %q", s, sub), msg)
	}
	return true
}

func lenIs[T any](t *testing.T, s []T, n int, msg ...any) bool {
	t.Helper()
	if len(s) != n {
		return report(t, fmt.Sprintf("len %d, want %d", len(s), n), msg)
	}
	return true
}
