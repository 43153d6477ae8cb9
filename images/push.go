package images

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// PushOptions are what Push leaves to its caller.
type PushOptions struct {
	// Keychain finds the registry's credentials; nil is
	// authn.DefaultKeychain (the Docker config file and its credential
	// helpers, as docker login and crane write them). Credentials are sent
	// to the registry only, never printed.
	Keychain authn.Keychain
	// Transport replaces http.DefaultTransport (tests).
	Transport http.RoundTripper
	// Progress, when set, gets each image's reference before its upload and
	// the bytes uploaded of its blobs as they go.
	Progress func(ref string, done, total int64)
}

// CheckRepository refuses what Push cannot push to: repo must be
// REGISTRY[:PORT][/PATH], with no tag or digest.
func CheckRepository(repo string) error {
	repo = strings.TrimSuffix(repo, "/")
	if repo == "" {
		return fmt.Errorf("images: --push needs a registry repository, REGISTRY[:PORT][/PATH]")
	}
	if _, err := name.NewRepository(repo+"/"+string(KindBase), name.StrictValidation); err != nil {
		return fmt.Errorf("images: --push %q: give a registry repository, REGISTRY[:PORT][/PATH] (no tag or digest)", repo)
	}
	return nil
}

// Push uploads every image of s to the registry repository repo
// (REGISTRY/PATH, e.g. registry.example/hookbox) as repo/<kind>:<tag>, with
// go-containerregistry's remote package reading the Set's OCI layout:
// blobs the registry already has are not sent again, and the manifest is
// sent as the Set holds it, so the registry's digest is ManifestDigest.
// It then asks the registry for each tag and refuses one that names
// another digest. It returns the references pinned by digest, in the
// order of s.Images(). A registry on localhost or 127.0.0.1 is spoken to
// over plain HTTP, any other over HTTPS.
func Push(ctx context.Context, s *Set, repo string, o PushOptions) ([]string, error) {
	repo = strings.TrimSuffix(repo, "/")
	if err := CheckRepository(repo); err != nil {
		return nil, err
	}
	index, err := layout.ImageIndexFromPath(s.Dir())
	if err != nil {
		return nil, fmt.Errorf("images: reading the OCI layout %s: %w", s.Dir(), err)
	}
	keychain := o.Keychain
	if keychain == nil {
		keychain = authn.DefaultKeychain
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(keychain)}
	if o.Transport != nil {
		opts = append(opts, remote.WithTransport(o.Transport))
	}
	refs := make([]string, 0, len(s.Images()))
	for _, b := range s.Images() {
		tag, err := name.NewTag(b.Repository(repo) + ":" + b.Tag())
		if err != nil {
			return nil, fmt.Errorf("images: %s: %w", b.Name, err)
		}
		hash, err := v1.NewHash(b.ManifestDigest.String())
		if err != nil {
			return nil, fmt.Errorf("images: %w", err)
		}
		img, err := index.Image(hash)
		if err != nil {
			return nil, fmt.Errorf("images: %s in the OCI layout: %w", b.Name, err)
		}
		imageOpts := opts
		if o.Progress != nil {
			o.Progress(tag.String(), 0, b.Size)
			updates := make(chan v1.Update, 16)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for u := range updates {
					o.Progress(tag.String(), u.Complete, u.Total)
				}
			}()
			imageOpts = append(append([]remote.Option(nil), opts...), remote.WithProgress(updates))
			err = remote.Write(tag, img, imageOpts...)
			<-done // remote.Write closes updates
		} else {
			err = remote.Write(tag, img, imageOpts...)
		}
		if err != nil {
			return nil, fmt.Errorf("images: pushing %s: %w", tag, err)
		}
		desc, err := remote.Head(tag, opts...)
		if err != nil {
			return nil, fmt.Errorf("images: checking %s after the push: %w", tag, err)
		}
		if desc.Digest.String() != b.ManifestDigest.String() {
			return nil, fmt.Errorf("images: the registry says %s is %s, not the pushed %s", tag, desc.Digest, b.ManifestDigest)
		}
		refs = append(refs, b.Reference(repo))
	}
	return refs, nil
}
