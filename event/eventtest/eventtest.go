// Package eventtest builds events for tests: a valid event about one object
// version, with the fields a test does not care about filled in.
package eventtest

import "github.com/cairn-s3/cairn/event"

// Created returns an ObjectCreated:Put event for bucket/key with sequencer seq
// and the ETag "e-"+key.
func Created(bucket, key, seq string) event.Event {
	return event.Event{Bucket: bucket, Key: key, Sequencer: seq, ETag: "e-" + key, Kind: event.Created, Name: "ObjectCreated:Put"}
}

// Removed returns an ObjectRemoved:Delete event for bucket/key with sequencer
// seq.
func Removed(bucket, key, seq string) event.Event {
	return event.Event{Bucket: bucket, Key: key, Sequencer: seq, Kind: event.Removed, Name: "ObjectRemoved:Delete"}
}
