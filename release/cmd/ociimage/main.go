// Command ociimage writes bloomgate's multi-platform container image as an
// OCI image layout and an oci-archive tar, without a container engine
// (package ociimage). make release runs it:
//
//	go run ./cmd/ociimage -version v0.1.0 -revision $(git rev-parse HEAD) \
//	  -created $(git log -1 --format=%ct) -layout ../dist/image \
//	  -archive ../dist/bloomgate-v0.1.0.oci.tar \
//	  -binary linux/amd64=../dist/bloomgate-v0.1.0-linux-amd64 …
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/bloomgate/bloomgate/release/ociimage"
)

type binaries map[string]string

func (b binaries) String() string { return fmt.Sprint(map[string]string(b)) }
func (b binaries) Set(s string) error {
	p, path, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("%q: want os/arch=path", s)
	}
	b[p] = path
	return nil
}

func main() {
	o := ociimage.Options{Binaries: binaries{}}
	var created int64
	var layoutDir, archive string
	flag.StringVar(&o.Version, "version", "", "release version (label, tag)")
	flag.StringVar(&o.Revision, "revision", "", "commit the executables were built from")
	flag.StringVar(&o.Source, "source", "https://github.com/bloomgate/bloomgate", "source repository URL")
	flag.StringVar(&o.Licenses, "licenses", "Apache-2.0", "SPDX license expression")
	flag.StringVar(&o.Name, "name", "ghcr.io/bloomgate/bloomgate", "image repository, without tag")
	flag.Int64Var(&created, "created", 0, "Unix time of every timestamp in the image (the commit's: git log -1 --format=%ct)")
	flag.StringVar(&layoutDir, "layout", "", "directory to write the OCI image layout to (must not exist)")
	flag.StringVar(&archive, "archive", "", "file to write the layout to as a tar (oci-archive); optional")
	flag.Var(binaries(o.Binaries), "binary", "os/arch=path of a static executable; repeat per platform")
	flag.Parse()
	if created > 0 {
		o.Created = time.Unix(created, 0)
	}
	if layoutDir == "" {
		fail(fmt.Errorf("-layout is required"))
	}
	idx, err := ociimage.Build(o)
	if err != nil {
		fail(err)
	}
	if err := ociimage.WriteLayout(layoutDir, idx, o); err != nil {
		fail(err)
	}
	if archive != "" {
		if err := ociimage.WriteArchive(archive, layoutDir, o.Created); err != nil {
			fail(err)
		}
	}
	d, err := idx.Digest()
	if err != nil {
		fail(err)
	}
	fmt.Printf("%s:%s %s\n", o.Name, o.Version, d)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "ociimage:", err)
	os.Exit(1)
}
