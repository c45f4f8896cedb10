package keys_test

import (
	"fmt"

	"github.com/bloomgate/bloomgate/internal/keys"
)

func ExampleExtractor_Extract() {
	e, err := keys.NewExtractor("json:order.id", "trim", 256)
	if err != nil {
		panic(err)
	}
	buf := make([]byte, 0, 256) // reused for every record: no allocation
	k, err := e.Extract(buf[:0], nil, []byte(`{"order":{"id":"  A-17 "},"amount":3}`), nil)
	fmt.Printf("%q %v\n", k, err)

	_, err = e.Extract(buf[:0], nil, []byte(`{"order":{}}`), nil)
	fmt.Println(keys.ReasonOf(err))
	// Output:
	// "A-17" <nil>
	// missing
}

func ExampleNormalizeURL() {
	for _, u := range []string{
		"HTTPS://Shop.Example.COM:443/a/./b/../%7Eitem?size=m&color=red#reviews",
		"https://shop.example.com/a/~item?color=red&size=m",
	} {
		out, err := keys.NormalizeURL(nil, u)
		fmt.Println(string(out), err)
	}
	// Output:
	// https://shop.example.com/a/~item?color=red&size=m <nil>
	// https://shop.example.com/a/~item?color=red&size=m <nil>
}
