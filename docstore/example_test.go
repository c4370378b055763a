package docstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// Registry is the data-lake metastore of seed 004: which files each dataset has.
type Registry struct {
	Datasets map[string][]string `json:"datasets"`
}

// The data-lake registry: pipelines write dataset files once (If-None-Match) and
// then record them in a shared registry document, many writers at a time,
// without a lock service and without losing a single entry.
func Example_dataLakeRegistry() {
	ctx := context.Background()
	store := mem.Open() // objstore.Open(ctx, "s3://bucket?…", nil) in production
	reg := docstore.Typed[Registry](docstore.New(store, nil))

	publish := func(dataset, file string, rows []byte) error {
		key := "datasets/" + dataset + "/" + file
		// Write-once: a retried or duplicated pipeline run cannot overwrite the file.
		_, err := store.PutBytes(ctx, key, rows, &objstore.PutOptions{If: objstore.IfAbsent()})
		if err != nil && !errors.Is(err, objstore.ErrPreconditionFailed) {
			return err
		}
		// Record it in the registry; concurrent writers are combined, none lost.
		_, _, err = reg.Update(ctx, "metastore/dataset_registry.json", func(r *Registry, _ docstore.Meta) error {
			if r.Datasets == nil {
				r.Datasets = map[string][]string{}
			}
			if !slices.Contains(r.Datasets[dataset], key) {
				r.Datasets[dataset] = append(r.Datasets[dataset], key)
			}
			return nil
		})
		return err
	}

	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			ds := []string{"customer_profiles", "location_events"}[i%2]
			if err := publish(ds, fmt.Sprintf("part-%03d.parquet", i), []byte("rows")); err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()
	// A duplicate delivery of the same pipeline run changes nothing.
	_ = publish("customer_profiles", "part-000.parquet", []byte("rows again"))

	r, meta, _ := reg.Load(ctx, "metastore/dataset_registry.json")
	for _, ds := range []string{"customer_profiles", "location_events"} {
		fmt.Println(ds, len(r.Datasets[ds]))
	}
	fmt.Println("revision ≤ 11:", meta.Rev <= 11)
	// Output:
	// customer_profiles 5
	// location_events 5
	// revision ≤ 11: true
}
