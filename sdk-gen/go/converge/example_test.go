package converge_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"converge.dev/sdk/go/converge"
	convergev1 "converge.dev/sdk/go/gen/converge/v1"
)

// Apply a resource, read it back, list a kind page by page, watch it, and
// decode an error. (Compiled, not run: it needs a server.)
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := converge.Dial("127.0.0.1:50051")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	type spec struct {
		Value string `json:"value"`
	}
	if _, err := c.ApplyResource(ctx, "conf-leaf", 1, "r1", spec{Value: "hello"},
		converge.WithLabels(map[string]string{"team": "a"})); err != nil {
		log.Fatal(err)
	}
	r, err := c.GetResource(ctx, "conf-leaf", "r1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.GetPhase(), r.GetStatus().AsMap())

	kind := "conf-leaf"
	for r, err := range c.ListResources(ctx, &convergev1.ListResourcesRequest{Kind: &kind, LabelSelector: "team=a"}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(r.GetName(), r.GetPhase())
	}

	// A snapshot, then every change; a server restart is resumed transparently.
	for m, err := range c.WatchResources(ctx, &convergev1.WatchResourcesRequest{Kind: &kind}) {
		if err != nil {
			break // ctx ended, or the watch cannot resume (e.g. ERROR_REASON_RESOURCE_VERSION_TOO_OLD)
		}
		fmt.Println(m.GetType(), m.GetResource().GetName(), m.GetResourceVersion())
	}

	_, err = c.GetResource(ctx, "conf-leaf", "missing")
	if e := converge.AsError(err); e != nil {
		fmt.Println(e.Code, e.ErrorReason(), e.Metadata, e.FieldViolations)
	}
	if _, err := c.DeleteResource(ctx, "conf-leaf", "r1", converge.AllowMissing()); err != nil {
		log.Fatal(err)
	}
}
