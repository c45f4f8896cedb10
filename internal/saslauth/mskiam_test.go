package saslauth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	signer "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/segmentio/kafka-go/sasl"
)

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

// sigV4 computes a presigned GET's signature by the SigV4 specification,
// without the SDK: canonical request, string to sign, derived key.
func sigV4(secret, region, service, host, date string, query url.Values) string {
	keys := make([]string, 0, len(query))
	for k := range query {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var q []string
	for _, k := range keys {
		// RFC 3986 encoding: url.QueryEscape writes a space as +.
		q = append(q, strings.ReplaceAll(url.QueryEscape(k), "+", "%20")+"="+strings.ReplaceAll(url.QueryEscape(query.Get(k)), "+", "%20"))
	}
	canonical := strings.Join([]string{"GET", "/", strings.Join(q, "&"), "host:" + host + "\n", "host",
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}, "\n")
	sum := sha256.Sum256([]byte(canonical))
	scope := date[:8] + "/" + region + "/" + service + "/aws4_request"
	toSign := "AWS4-HMAC-SHA256\n" + date + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
	k := hmacSHA256([]byte("AWS4"+secret), date[:8])
	k = hmacSHA256(k, region)
	k = hmacSHA256(k, service)
	k = hmacSHA256(k, "aws4_request")
	return hex.EncodeToString(hmacSHA256(k, toSign))
}

// TestMSKIAMPayload: the AWS_MSK_IAM payload built with static credentials
// at a fixed time has MSK's fields, and its signature is the SigV4
// signature of the kafka-cluster:Connect request, computed here from the
// specification and by the SDK's signer.
func TestMSKIAMPayload(t *testing.T) {
	const (
		keyID   = "AKIDEXAMPLE"
		secret  = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
		session = "session-token/with+chars="
		region  = "eu-west-1"
		host    = "b-1.demo.abc123.c2.kafka.eu-west-1.amazonaws.com"
	)
	at := time.Date(2026, 12, 7, 14, 30, 5, 0, time.UTC)
	m := NewMSKIAMWith(credentials.NewStaticCredentialsProvider(keyID, secret, session), region, "SETTINGS")
	m.SignTime = at
	if m.Name() != "AWS_MSK_IAM" {
		t.Fatalf("name %q", m.Name())
	}
	ctx := sasl.WithMetadata(context.Background(), &sasl.Metadata{Host: host, Port: 9098})
	sm, ir, err := m.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]string
	if err := json.Unmarshal(ir, &p); err != nil {
		t.Fatalf("payload %s: %v", ir, err)
	}
	want := map[string]string{
		"version": "2020_10_22", "host": host, "action": "kafka-cluster:Connect",
		"x-amz-algorithm": "AWS4-HMAC-SHA256", "x-amz-credential": keyID + "/20261207/" + region + "/kafka-cluster/aws4_request",
		"x-amz-date": "20261207T143005Z", "x-amz-security-token": session, "x-amz-signedheaders": "host", "x-amz-expires": "300",
	}
	for k, v := range want {
		if p[k] != v {
			t.Errorf("%s = %q, want %q", k, p[k], v)
		}
	}
	if !strings.HasPrefix(p["user-agent"], "kafka-go/sasl/aws_msk_iam_v2/") {
		t.Errorf("user-agent %q", p["user-agent"])
	}
	if len(p) != len(want)+2 {
		t.Errorf("payload has %d fields, want %d: %v", len(p), len(want)+2, p)
	}

	query := url.Values{
		"Action": {"kafka-cluster:Connect"}, "X-Amz-Algorithm": {p["x-amz-algorithm"]}, "X-Amz-Credential": {p["x-amz-credential"]},
		"X-Amz-Date": {p["x-amz-date"]}, "X-Amz-Expires": {p["x-amz-expires"]}, "X-Amz-Security-Token": {session},
		"X-Amz-SignedHeaders": {"host"},
	}
	if got, want := p["x-amz-signature"], sigV4(secret, region, "kafka-cluster", host, p["x-amz-date"], query); got != want {
		t.Errorf("signature %s, the specification gives %s", got, want)
	}
	req, _ := http.NewRequest(http.MethodGet, "kafka://"+host+"/?Action=kafka-cluster%3AConnect&X-Amz-Expires=300", nil)
	signed, _, err := signer.NewSigner().PresignHTTP(context.Background(), aws.Credentials{AccessKeyID: keyID, SecretAccessKey: secret, SessionToken: session},
		req, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "kafka-cluster", region, at)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(signed)
	if got := u.Query().Get("X-Amz-Signature"); got != p["x-amz-signature"] {
		t.Errorf("the SDK's signer gives %s, the payload %s", got, p["x-amz-signature"])
	}
	// A wrong secret gives another signature: the check can fail.
	if sigV4("other", region, "kafka-cluster", host, p["x-amz-date"], query) == p["x-amz-signature"] {
		t.Error("the signature does not depend on the secret")
	}
	if done, _, err := sm.Next(ctx, []byte(`{"version":"2020_10_22","request-id":"x"}`)); !done || err != nil {
		t.Errorf("server answer: done %v, %v", done, err)
	}
}

// TestMSKIAMCredentialsPerConnection: credentials are asked for at every
// new connection (the SDK's cache renews them), and a failure names the
// settings.
func TestMSKIAMCredentialsPerConnection(t *testing.T) {
	n := 0
	prov := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		n++
		if n > 2 {
			return aws.Credentials{}, context.DeadlineExceeded
		}
		return aws.Credentials{AccessKeyID: "AK" + string(rune('0'+n)), SecretAccessKey: "s"}, nil
	})
	m := NewMSKIAMWith(prov, "us-east-1", "SETTINGS")
	ctx := sasl.WithMetadata(context.Background(), &sasl.Metadata{Host: "h", Port: 9098})
	var creds []string
	for range 2 {
		_, ir, err := m.Start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var p map[string]string
		_ = json.Unmarshal(ir, &p)
		creds = append(creds, strings.Split(p["x-amz-credential"], "/")[0])
	}
	if creds[0] != "AK1" || creds[1] != "AK2" {
		t.Errorf("credentials per connection %v, want AK1 then AK2", creds)
	}
	if _, _, err := m.Start(ctx); err == nil || !strings.Contains(err.Error(), "SETTINGS") {
		t.Errorf("failing credentials: %v", err)
	}
}
