package event_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/event"
)

// eventNames is every event name AWS S3 (event versions 2.1 to 2.3 and the
// API's current list of notification types) and MinIO (internal/event/name.go
// at the pinned release) send in a record, each classified on purpose: a
// change (Created, Removed) when the content at the key appeared, was
// replaced or went away; Other when it did not, or there is no object.
var eventNames = []struct {
	name string
	kind event.Kind
	why  string
}{
	// AWS S3.
	{"ObjectCreated:Put", event.Created, "content written"},
	{"ObjectCreated:Post", event.Created, "content written by a browser form"},
	{"ObjectCreated:Copy", event.Created, "content written by a copy"},
	{"ObjectCreated:CompleteMultipartUpload", event.Created, "content written in parts"},
	{"ObjectRemoved:Delete", event.Removed, "a version deleted (unversioned: the object)"},
	{"ObjectRemoved:DeleteMarkerCreated", event.Removed, "the key now reads as absent"},
	{"LifecycleExpiration:Delete", event.Removed, "a lifecycle rule deleted the object or a version: a deletion S3 never sends as ObjectRemoved"},
	{"LifecycleExpiration:DeleteMarkerCreated", event.Removed, "a lifecycle rule expired the current version: the key now reads as absent"},
	{"ObjectRestore:Post", event.Other, "a restore of an archived object began: content unchanged"},
	{"ObjectRestore:Completed", event.Other, "a temporary readable copy exists: content unchanged"},
	{"ObjectRestore:Delete", event.Other, "the temporary restored copy expired: the archived object stays"},
	{"ReducedRedundancyLostObject", event.Other, "RRS data lost: the key still lists and an overwrite restores it; no write or delete to hand on"},
	{"Replication:OperationFailedReplication", event.Other, "replication status of the source object: content unchanged"},
	{"Replication:OperationNotTracked", event.Other, "replication status: content unchanged"},
	{"Replication:OperationMissedThreshold", event.Other, "replication status: content unchanged"},
	{"Replication:OperationReplicatedAfterThreshold", event.Other, "replication status (the replica is announced by the destination bucket)"},
	{"LifecycleTransition", event.Other, "storage class changed: content unchanged"},
	{"IntelligentTiering", event.Other, "access tier changed: content unchanged"},
	{"IntelligentTiering:TransitionAccess", event.Other, "as aws-lambda-go records it: access tier changed"},
	{"ObjectTagging:Put", event.Other, "tags set: content unchanged"},
	{"ObjectTagging:Delete", event.Other, "tags removed: content unchanged"},
	{"ObjectAcl:Put", event.Other, "permissions changed: content unchanged"},
	{"ObjectAnnotation:Put", event.Other, "an annotation attached: content unchanged"},
	{"ObjectAnnotation:Delete", event.Other, "an annotation removed: content unchanged"},
	{"TestEvent", event.Test, "sent when a notification is configured: no object"},
	// MinIO, beyond the names it shares with S3.
	{"ObjectCreated:PutTagging", event.Other, "metadata only; may name a noncurrent version with a fresh sequencer, which as a change would roll the key's accepted state back"},
	{"ObjectCreated:DeleteTagging", event.Other, "metadata only, as PutTagging"},
	{"ObjectCreated:PutRetention", event.Other, "object lock retention set: metadata only, may name a noncurrent version"},
	{"ObjectCreated:PutLegalHold", event.Other, "legal hold set: metadata only, may name a noncurrent version"},
	{"ObjectRemoved:DeleteAllVersions", event.Removed, "a lifecycle rule deleted every version of the key"},
	{"ObjectRemoved:NoOP", event.Other, "a delete of a key that did not exist: nothing changed"},
	{"LifecycleDelMarkerExpiration:Delete", event.Removed, "a lifecycle rule removed a delete marker with every version: the key's last trace gone"},
	{"ObjectAccessed:Get", event.Other, "a read"},
	{"ObjectAccessed:GetRetention", event.Other, "a read"},
	{"ObjectAccessed:GetLegalHold", event.Other, "a read"},
	{"ObjectAccessed:Head", event.Other, "a read"},
	{"ObjectAccessed:Attributes", event.Other, "a read"},
	{"Replication:OperationCompletedReplication", event.Other, "replication status of the source (MinIO sends no event for the replica it writes)"},
	{"ObjectTransition:Failed", event.Other, "tiering to a remote tier failed: content unchanged"},
	{"ObjectTransition:Complete", event.Other, "tiered to a remote tier: content unchanged"},
	{"Scanner:ManyVersions", event.Other, "a warning about the version count; the write itself has its own event"},
	{"Scanner:LargeVersions", event.Other, "a warning about the versions' total size"},
	{"Scanner:BigPrefix", event.Other, "a warning about a prefix with many folders: names a prefix, not an object"},
	{"BucketCreated:*", event.Other, "a bucket event: no object"},
	{"BucketRemoved:*", event.Other, "a bucket event: no object"},
	// Subscription wildcards, as hand-written senders use them.
	{"ObjectCreated:*", event.Created, "any creation"},
	{"ObjectRemoved:*", event.Removed, "any removal"},
	{"LifecycleExpiration:*", event.Removed, "any lifecycle deletion"},
}

func nameRecord(name, rawKey string) string {
	return `{"Records":[{"eventVersion":"2.3","eventSource":"aws:s3","eventName":"` + name +
		`","s3":{"bucket":{"name":"bkt"},"object":{"key":"` + rawKey + `","size":3,"eTag":"e","sequencer":"0A"}}}]}`
}

func TestEventNames(t *testing.T) {
	t.Parallel()
	for _, tc := range eventNames {
		for _, name := range []string{tc.name, "s3:" + tc.name} {
			for _, body := range []string{nameRecord(name, "dir/a+b"), `{"EventName":"` + name + `","Key":"bkt/dir/a b",` + nameRecord(name, "dir%2Fa+b")[1:]} {
				evs, err := event.Parse([]byte(body))
				if err != nil || len(evs) != 1 {
					t.Errorf("%s: %v %v, want one %s event (%s)", name, evs, err, tc.kind, tc.why)
					continue
				}
				ev := evs[0]
				if ev.Kind != tc.kind || ev.Name != tc.name || ev.Key != "dir/a b" || ev.Bucket != "bkt" {
					t.Errorf("%s: kind %s name %q key %q, want %s (%s)", name, ev.Kind, ev.Name, ev.Key, tc.kind, tc.why)
				}
				if ev.Ignorable() != (tc.kind == event.Other || tc.kind == event.Test) {
					t.Errorf("%s: Ignorable %v", name, ev.Ignorable())
				}
			}
		}
	}
}

// MinIO's bucket events and other ignorable records may carry no object key:
// they are Other, never a malformed record a sender would retry for ever.
func TestIgnorableWithoutObject(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"s3:BucketCreated:*", "s3:BucketRemoved:*", "s3:ObjectCreated:PutTagging"} {
		body := `{"EventName":"` + name + `","Key":"bkt/","Records":[{"eventVersion":"2.0","eventSource":"minio:s3","eventName":"` + name +
			`","s3":{"bucket":{"name":"bkt"},"object":{"key":"","sequencer":"18EA62B45DD80160"}}}]}`
		evs, err := event.Parse([]byte(body))
		if err != nil || len(evs) != 1 || evs[0].Kind != event.Other || evs[0].Key != "" || evs[0].Validate() != nil {
			t.Errorf("%s: %+v %v, want one Other event without a key that validates", name, evs, err)
		}
	}
	// A change still needs its key.
	if _, err := event.Parse([]byte(nameRecord("ObjectCreated:Put", ""))); !errors.Is(err, event.ErrMalformed) {
		t.Errorf("a creation without a key: %v, want ErrMalformed", err)
	}
	if err := (event.Event{Bucket: "b", Kind: event.Removed}).Validate(); err == nil {
		t.Error("a removal without a key validates")
	}
}

// Names outside every family, and unknown removals (was content removed?),
// are ErrUnknownEventType for that record alone.
func TestUnknownEventNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"Frobnicated", "s3:ObjectTeleported:Beam", "ObjectRemoved:Vaporized", "ObjectLegalHold:Put", "", "objectcreated:put"} {
		body := `{"Records":[` + strings.TrimSuffix(strings.TrimPrefix(nameRecord(name, "k"), `{"Records":[`), `]}`) + `,` +
			strings.TrimSuffix(strings.TrimPrefix(nameRecord("ObjectCreated:Put", "good"), `{"Records":[`), `]}`) + `]}`
		evs, rejected, err := event.ParseAll([]byte(body))
		want := event.ErrUnknownEventType
		if name == "" {
			want = event.ErrMalformed // missing
		}
		if err != nil || len(evs) != 1 || evs[0].Key != "good" || len(rejected) != 1 || !errors.Is(rejected[0], want) || rejected[0].Field != "Records[0].eventName" {
			t.Errorf("%q: %v %v %v, want the good record kept and this one rejected (%v)", name, evs, rejected, err, want)
		}
	}
}

// Every detail-type S3 sends to EventBridge, and "Object Deleted" for every
// reason and deletion type.
func TestEventBridgeDetailTypes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		detailType, reason, deletionType string
		kind                             event.Kind
	}{
		{"Object Created", "PutObject", "", event.Created},
		{"Object Created", "POST Object", "", event.Created},
		{"Object Created", "CopyObject", "", event.Created},
		{"Object Created", "CompleteMultipartUpload", "", event.Created},
		{"Object Deleted", "DeleteObject", "Permanently Deleted", event.Removed},
		{"Object Deleted", "DeleteObject", "Delete Marker Created", event.Removed},
		{"Object Deleted", "Lifecycle Expiration", "Permanently Deleted", event.Removed},
		{"Object Deleted", "Lifecycle Expiration", "Delete Marker Created", event.Removed},
		{"Object Restore Initiated", "", "", event.Other},
		{"Object Restore Completed", "", "", event.Other},
		{"Object Restore Expired", "", "", event.Other},
		{"Object Tags Added", "", "", event.Other},
		{"Object Tags Deleted", "", "", event.Other},
		{"Object ACL Updated", "", "", event.Other},
		{"Object Storage Class Changed", "", "", event.Other},
		{"Object Access Tier Changed", "", "", event.Other},
		{"Async Copy Completion", "", "", event.Other},
	}
	for _, tc := range tests {
		detail := map[string]any{"bucket": map[string]string{"name": "bkt"}, "object": map[string]any{"key": "a+b c", "size": 1, "sequencer": "0A"}}
		if tc.reason != "" {
			detail["reason"] = tc.reason
		}
		if tc.deletionType != "" {
			detail["deletion-type"] = tc.deletionType
		}
		body, _ := json.Marshal(map[string]any{"source": "aws.s3", "detail-type": tc.detailType, "detail": detail})
		evs, err := event.Parse(body)
		if err != nil || len(evs) != 1 || evs[0].Kind != tc.kind || evs[0].Key != "a+b c" {
			t.Errorf("%s (%s): %+v %v, want kind %s", tc.detailType, tc.reason, evs, err, tc.kind)
		}
	}
	if _, err := event.Parse([]byte(`{"source":"aws.s3","detail-type":"Object Vanished","detail":{"bucket":{"name":"b"},"object":{"key":"k"}}}`)); !errors.Is(err, event.ErrUnknownEventType) {
		t.Errorf("unknown detail-type: %v", err)
	}
}

// A removal of one version (a DELETE naming a version id, a lifecycle rule's
// noncurrent expiry) is marked VersionOnly, so that a ledger keeping the key's
// newest state does not take it for the key's removal; a delete marker's
// creation, a removal without a version (or with "null", as unversioned
// buckets may send), and every version's removal are about the key.
func TestVersionOnlyRemovals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, version string
		want          bool
	}{
		{"ObjectRemoved:Delete", "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY", true},
		{"s3:ObjectRemoved:Delete", "6821fe56-3e69-4e33-a4ac-378865bdd56e", true},
		{"LifecycleExpiration:Delete", "v1", true},
		{"ObjectRemoved:Delete", "", false},
		{"ObjectRemoved:Delete", "null", false},
		{"LifecycleExpiration:Delete", "", false},
		{"LifecycleExpiration:Delete", "null", false},
		{"ObjectRemoved:DeleteMarkerCreated", "m1", false},
		{"LifecycleExpiration:DeleteMarkerCreated", "m1", false},
		{"ObjectRemoved:DeleteAllVersions", "v1", false},
		{"LifecycleDelMarkerExpiration:Delete", "m1", false},
		{"ObjectRemoved:*", "v1", false},
		{"ObjectRemoved:NoOP", "v1", false},
		{"ObjectCreated:Put", "v1", false},
	}
	for _, tc := range tests {
		body := `{"Records":[{"eventVersion":"2.3","eventSource":"aws:s3","eventName":"` + tc.name +
			`","s3":{"bucket":{"name":"bkt"},"object":{"key":"k","versionId":"` + tc.version + `","sequencer":"0A"}}}]}`
		evs, err := event.Parse([]byte(body))
		if err != nil || len(evs) != 1 || evs[0].VersionOnly != tc.want || evs[0].VersionID != tc.version {
			t.Errorf("%s version %q: %+v %v, want VersionOnly %v", tc.name, tc.version, evs, err, tc.want)
		}
	}
	for _, tc := range []struct {
		reason, deletionType, version string
		want                          bool
	}{
		{"DeleteObject", "Permanently Deleted", "v1", true},
		{"Lifecycle Expiration", "Permanently Deleted", "v1", true},
		{"DeleteObject", "Permanently Deleted", "", false},
		{"Lifecycle Expiration", "Permanently Deleted", "null", false},
		{"DeleteObject", "Delete Marker Created", "m1", false},
		{"Lifecycle Expiration", "Delete Marker Created", "m1", false},
	} {
		object := map[string]any{"key": "k", "sequencer": "0A"}
		if tc.version != "" {
			object["version-id"] = tc.version
		}
		body, _ := json.Marshal(map[string]any{"source": "aws.s3", "detail-type": "Object Deleted", "detail": map[string]any{
			"bucket": map[string]string{"name": "bkt"}, "object": object, "reason": tc.reason, "deletion-type": tc.deletionType}})
		evs, err := event.Parse(body)
		if err != nil || len(evs) != 1 || evs[0].Kind != event.Removed || evs[0].VersionOnly != tc.want {
			t.Errorf("Object Deleted %s %s %q: %+v %v, want VersionOnly %v", tc.reason, tc.deletionType, tc.version, evs, err, tc.want)
		}
	}
}
