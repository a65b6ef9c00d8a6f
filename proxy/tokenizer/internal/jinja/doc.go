// Package jinja renders the subset of Jinja2 that Hugging Face chat templates use, with
// the semantics of transformers' environment: jinja2.sandbox.ImmutableSandboxedEnvironment
// with trim_blocks and lstrip_blocks, the loopcontrols extension, transformers' tojson
// (json.dumps with ensure_ascii off and keys unsorted), raise_exception, and strftime_now
// given by the caller.
//
// The model. A template is lexed once (text, {{ }}, {% %}, {# #} with the "-" and "+"
// whitespace controls, newlines normalised and one trailing newline dropped, as Jinja2
// does), parsed to an AST with Jinja2's operator precedence, and evaluated by a tree
// walker over Go values that stand for Python's: nil (None), bool, int64, float64,
// string, []any (list), tuple, *Dict (insertion-ordered, as Python's dicts), Undefined,
// *Namespace. Jinja2's semantics are followed where chat templates can tell: attribute
// lookup falls back to items and items to attributes, an undefined value prints as
// nothing and fails when used, a for loop's assignments start each iteration from the
// enclosing scope (hence namespace()), macros see the template's top-level names, str()
// and repr() write as Python writes, and so do the string methods templates call
// (split, strip, startswith, ...).
//
// What is not there: template inheritance and includes (chat templates are one file),
// recursive loops, autoescaping, async, and generators (items and dictsort give lists of
// tuples at once, so their length is known where Jinja2 would fail). The render is bounded (steps, output size, macro depth) so that a
// hostile template cannot run away; parsing is linear and bounded in depth.
//
// Rejected alternatives: a Go Jinja library from the module proxy (see the issue's
// report: the candidate renders the four families' templates identically on valid input
// but renders where Jinja2 raises, and its go.mod would raise the library's floor), and
// text/template translation (Jinja2's scoping and Python's value semantics do not map).
package jinja
