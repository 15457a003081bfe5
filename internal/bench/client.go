package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// newClient returns a keep-alive client for one worker. Every worker has
// one request in flight, so two idle connections per host are plenty; its
// own Transport keeps workers from queueing behind each other's pools.
func newClient(timeout time.Duration) *http.Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        2,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// maxPrealloc bounds what a Content-Length makes doInto allocate ahead.
const maxPrealloc = 8 << 20

// httpError is a non-2xx answer.
type httpError struct {
	status int
	body   string
}

func (e *httpError) Error() string { return fmt.Sprintf("http %d: %s", e.status, e.body) }

// do sends one request and returns the status and body. Non-2xx answers
// are returned as *httpError.
func do(ctx context.Context, c *http.Client, method, url string, body []byte) (int, []byte, error) {
	return doInto(ctx, c, method, url, body, new(bytes.Buffer))
}

// doInto is do reading the answer into buf, which a worker reuses from one
// request to the next: the body returned aliases buf until its next use.
func doInto(ctx context.Context, c *http.Client, method, url string, body []byte, buf *bytes.Buffer) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	buf.Reset()
	if resp.ContentLength > 0 && resp.ContentLength < maxPrealloc {
		buf.Grow(int(resp.ContentLength) + bytes.MinRead) // ReadFrom wants MinRead free at the end
	}
	_, err = buf.ReadFrom(resp.Body)
	data := buf.Bytes()
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("read body: %w", err)
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, data, &httpError{status: resp.StatusCode, body: string(data)}
	}
	return resp.StatusCode, data, nil
}

// classify names an error for the error log: "http 503", "timeout",
// "canceled" or "transport".
func classify(err error) string {
	var he *httpError
	switch {
	case errors.As(err, &he):
		return fmt.Sprintf("http %d", he.status)
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "transport"
}
