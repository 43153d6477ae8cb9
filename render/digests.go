package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"hookbox.dev/hookbox/render/canonjson"
)

// Digests are the two names of a render a user can pin
// (docs/architecture.md "Digests"): the plan digest, which any checkout of
// the same spec gives, and the content digest, which adds the bytes of
// every program.
type Digests struct {
	Plan string `json:"plan_digest"`
	// Content is Digest of the render with its runfiles manifest; "" until
	// the runfiles are assembled.
	Content string `json:"content_digest,omitempty"`
}

// Matches reports whether digest names this render: it is its plan digest
// or its content digest.
func (d Digests) Matches(digest string) bool {
	return digest == d.Plan || (d.Content != "" && digest == d.Content)
}

// Digests returns r's plan digest, and its content digest when r carries
// its runfiles manifest.
func (r *Render) Digests() (Digests, error) {
	plan, _, err := r.PlanDigest()
	if err != nil {
		return Digests{}, err
	}
	d := Digests{Plan: plan}
	if len(r.Runfiles) > 0 {
		if d.Content, _, err = r.Digest(); err != nil {
			return Digests{}, err
		}
	}
	return d, nil
}

// BaseToken stands for BaseDir in the plan form.
const BaseToken = "%{base}"

// ValidDigest reports whether s is a digest as hookbox prints one:
// "sha256:" and 64 lowercase hex digits. (A check, not a regexp: one
// compiled at init costs every hookbox command time.)
func ValidDigest(s string) bool {
	h, ok := strings.CutPrefix(s, "sha256:")
	return ok && len(h) == 64 && strings.Trim(h, "0123456789abcdef") == ""
}

// PlanDigest returns the plan digest, "sha256:<hex>" of the canonical JSON
// of r's plan form, and those bytes. The plan form is r without its
// runfiles manifest and without BaseDir, with every string value rewritten
// so that the checkout's location is gone: first each "%" as "%25", then
// each occurrence of BaseDir that ends the string or is followed by "/" as
// BaseToken. A container path derived from a host path (HostDir + it) is
// rewritten with it. The lists are then sorted again, as paths under
// BaseDir may sort differently once rewritten. The escaping makes the
// rewrite reversible: two renders with the same plan digest are the same
// render up to BaseDir. A BaseDir of "/" rewrites nothing.
func (r *Render) PlanDigest() (string, []byte, error) {
	form, err := r.planForm()
	if err != nil {
		return "", nil, err
	}
	return canonjson.Digest(form)
}

func (r *Render) planForm() (*Render, error) {
	stripped := *r
	stripped.Runfiles, stripped.BaseDir = nil, ""
	data, err := canonjson.Marshal(&stripped)
	if err != nil {
		return nil, err
	}
	// Rewriting the JSON value rather than the struct reaches every string
	// the digest covers, including those of fields added later.
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // integers beyond 2^53 stay exact
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, fmt.Errorf("plan form: %w", err)
	}
	if data, err = json.Marshal(rewriteStrings(tree, func(s string) string { return PlanString(s, r.BaseDir) })); err != nil {
		return nil, fmt.Errorf("plan form: %w", err)
	}
	var form Render
	if err := json.Unmarshal(data, &form); err != nil {
		return nil, fmt.Errorf("plan form: %w", err)
	}
	form.SortLists()
	return &form, nil
}

// rewriteStrings applies f to every string value of a decoded JSON value
// (object keys are field names and stay as they are).
func rewriteStrings(v any, f func(string) string) any {
	switch v := v.(type) {
	case string:
		return f(v)
	case []any:
		for i := range v {
			v[i] = rewriteStrings(v[i], f)
		}
	case map[string]any:
		for k := range v {
			v[k] = rewriteStrings(v[k], f)
		}
	}
	return v
}

// PlanString is s as the plan form of a render with BaseDir base writes it
// (PlanDigest); base "" or "/" only escapes. Ordering paths by it gives an
// order that does not depend on where the checkout lives.
func PlanString(s, base string) string {
	s = strings.ReplaceAll(s, "%", "%25")
	if base == "" || base == "/" {
		return s
	}
	base = strings.ReplaceAll(base, "%", "%25")
	var b strings.Builder
	for {
		i := strings.Index(s, base)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(base)
		if end == len(s) || s[end] == '/' {
			b.WriteString(s[:i])
			b.WriteString(BaseToken)
			s = s[end:]
			continue
		}
		// Not a path boundary ("/src/ws" in "/src/ws2"): look again one
		// byte further.
		b.WriteString(s[:i+1])
		s = s[i+1:]
	}
}
