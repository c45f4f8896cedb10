package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
)

// StoreError is a failure to use the checkpoint store whose cause is
// known, worded for the person who set --checkpoint-url: the setting, what
// is wrong and the fix. It wraps the store's error.
type StoreError struct {
	URL string // redacted
	msg string
	err error
}

func (e *StoreError) Error() string { return e.msg }
func (e *StoreError) Unwrap() error { return e.err }

// Explain words err, a failure to open or use the store at raw, when its
// cause is known: no S3 credentials, a local directory this process may
// not write, a read-only or full file system. It returns a *StoreError
// then, and err unchanged otherwise (and for nil).
func Explain(raw string, err error) error {
	if err == nil {
		return nil
	}
	var se *StoreError
	if errors.As(err, &se) {
		return err
	}
	shown := RedactURL(raw)
	if errors.Is(err, ErrNoCredentials) {
		return &StoreError{URL: shown, err: err, msg: fmt.Sprintf(
			"--checkpoint-url %s: no S3 credentials: the AWS SDK's default chain found none (environment, shared config "+
				"and profile, web identity, container or instance role); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "+
				"(on Kubernetes: the bloomgate-s3 Secret), or AWS_PROFILE with a shared config, or give the pod a role "+
				"(IRSA: annotate the bloomgate ServiceAccount)", shown)}
	}
	u, perr := url.Parse(raw)
	if perr != nil || u.Scheme != "file" {
		return err
	}
	var pe *fs.PathError
	where := u.Path
	if errors.As(err, &pe) {
		where = pe.Path
	}
	what := "cannot write " + where
	dir := existingDir(where)
	if dir != where {
		what = fmt.Sprintf("cannot create %s in %s", where, dir)
	}
	switch {
	case errors.Is(err, syscall.EROFS):
		return &StoreError{URL: shown, err: err, msg: fmt.Sprintf(
			"--checkpoint-url %s: %s: the file system is read-only; point --checkpoint-url at a writable directory "+
				"(in a container: a writable, persistent volume mounted there), or use s3://", shown, what)}
	case errors.Is(err, fs.ErrPermission):
		return &StoreError{URL: shown, err: err, msg: fmt.Sprintf(
			"--checkpoint-url %s: %s: permission denied for this process (uid %d); make %s writable for it "+
				"(e.g. chown %d %s) or point --checkpoint-url at a writable directory", shown, what, os.Geteuid(), dir, os.Geteuid(), dir)}
	case errors.Is(err, syscall.ENOSPC):
		return &StoreError{URL: shown, err: err, msg: fmt.Sprintf(
			"--checkpoint-url %s: %s: no space left on the device; free space there or give the checkpoints a larger volume", shown, what)}
	case errors.Is(err, syscall.ENOTDIR):
		return &StoreError{URL: shown, err: err, msg: fmt.Sprintf(
			"--checkpoint-url %s: %s: a part of the path is a file, not a directory; point --checkpoint-url at a directory", shown, what)}
	}
	return err
}

// existingDir is the nearest ancestor of path that exists (path itself if
// it does): the directory whose permissions decide.
func existingDir(path string) string {
	for p := filepath.Clean(path); ; {
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(p)
		if parent == p {
			return p
		}
		p = parent
	}
}
