package saslauth

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	signer "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/segmentio/kafka-go/sasl"
	mskiam "github.com/segmentio/kafka-go/sasl/aws_msk_iam_v2"
)

// MechanismAWSMSKIAM is the SASL name of AWS MSK IAM.
const MechanismAWSMSKIAM = "AWS_MSK_IAM"

// MSKIAM is the AWS_MSK_IAM mechanism (kafka-go's aws_msk_iam_v2): for
// every new connection, a SigV4-presigned kafka-cluster:Connect payload
// with the credentials the provider gives then. The SDK's credential cache
// renews temporary credentials (a role, web identity, IMDS) before they
// expire.
type MSKIAM struct {
	mskiam.Mechanism
	Settings string
}

// Describe names the mechanism's settings, for error messages.
func (m *MSKIAM) Describe() string { return m.Settings }

// Start implements sasl.Mechanism, marking failures to get credentials.
func (m *MSKIAM) Start(ctx context.Context) (sasl.StateMachine, []byte, error) {
	sm, ir, err := m.Mechanism.Start(ctx)
	if err != nil {
		// Most often no credentials at all (none in the environment, the
		// shared files, a web identity or an instance role): not retried.
		return nil, nil, &Error{Settings: m.Settings, Err: fmt.Errorf("AWS credentials: %w", err)}
	}
	return sm, ir, nil
}

// NewMSKIAM builds the mechanism on the AWS SDK's default configuration
// (environment, shared files, web identity, container and instance
// roles); region overrides the one found there.
func NewMSKIAM(ctx context.Context, region, settings string) (*MSKIAM, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if region != "" {
		opts = append(opts, awsconfig.WithRegion(region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, &Error{Settings: settings, Err: fmt.Errorf("loading the AWS configuration: %w", err)}
	}
	if cfg.Region == "" {
		return nil, &Error{Settings: settings, Err: errors.New("no AWS region: set --sasl-aws-region, AWS_REGION or a region in the AWS profile")}
	}
	return NewMSKIAMWith(cfg.Credentials, cfg.Region, settings), nil
}

// NewMSKIAMWith builds the mechanism with the given credentials.
func NewMSKIAMWith(creds aws.CredentialsProvider, region, settings string) *MSKIAM {
	return &MSKIAM{Mechanism: mskiam.Mechanism{Signer: signer.NewSigner(), Credentials: creds, Region: region, Expiry: 5 * time.Minute}, Settings: settings}
}
