variable "name" {
  description = "Name of the function, and prefix of the queue, role, schedule and log group."
  type        = string
  default     = "cairn"
}

variable "region" {
  description = "AWS region; null: the provider's default (AWS_REGION, the profile)."
  type        = string
  default     = null
}

variable "bootstrap_zip" {
  description = "Zip holding the function's code: the cairn binary named bootstrap (GOOS=linux GOARCH=arm64 go build -tags lambda.norpc -o bootstrap ./cmd/cairn), and your handler if it is a command."
  type        = string
  default     = "bootstrap.zip"
}

variable "bucket" {
  description = "The existing bucket whose object changes are processed. Its event notifications are managed here (aws_s3_bucket_notification replaces any others the bucket has)."
  type        = string
}

variable "events_prefix" {
  description = "Only keys under this prefix are announced (\"\": every key). With the ledger in the same bucket, give one that excludes the ledger's prefix, or each ledger write costs an invocation (cairn skips its own objects, but S3 still announces them)."
  type        = string
  default     = ""
}

variable "handler_exec" {
  description = "Command run per key by /bin/sh -c in the function's directory (CAIRN_HANDLER_EXEC); exit 0 processed, 75 retry, other failure."
  type        = string
  default     = "./handle.sh"
}

variable "handler_http" {
  description = "Instead of handler_exec: the URL each claim is POSTed to (CAIRN_HANDLER_HTTP)."
  type        = string
  default     = ""
}

variable "ledger" {
  description = "Where the ledger lives: \"s3\" (the object-store ledger: nothing but a bucket), \"dynamodb\" (a table made here) or \"postgres\" (postgres_url, reached through subnet_ids)."
  type        = string
  default     = "s3"
  validation {
    condition     = contains(["s3", "dynamodb", "postgres"], var.ledger)
    error_message = "ledger must be s3, dynamodb or postgres."
  }
}

variable "ledger_bucket" {
  description = "For ledger = \"s3\": the bucket that keeps the ledger (\"\": the events bucket itself)."
  type        = string
  default     = ""
}

variable "ledger_prefix" {
  description = "For ledger = \"s3\": the key prefix the ledger is kept under."
  type        = string
  default     = "cairn-ledger"
}

variable "dynamodb_table" {
  description = "For ledger = \"dynamodb\": the table made here for the ledger."
  type        = string
  default     = "cairn-ledger"
}

variable "postgres_url" {
  description = "For ledger = \"postgres\": postgres://USER:PASSWORD@HOST:5432/DB?sslmode=require (it is in the function's environment)."
  type        = string
  default     = ""
  sensitive   = true
}

variable "subnet_ids" {
  description = "For ledger = \"postgres\": private subnets from which the function reaches the database (empty: no VPC)."
  type        = list(string)
  default     = []
}

variable "security_group_ids" {
  description = "For ledger = \"postgres\": security groups of the function, allowed to reach the database."
  type        = list(string)
  default     = []
}

variable "audit" {
  description = "Each scheduled jobs invocation LISTs the bucket against the ledger and runs the changes no event announced (CAIRN_AUDIT)."
  type        = bool
  default     = false
}

variable "environment" {
  description = "More CAIRN_* settings of the function (CAIRN_CONCURRENCY, CAIRN_POISON, CAIRN_RETENTION, CAIRN_LOG_LEVEL, …); they win over this template's."
  type        = map(string)
  default     = {}
}

variable "extra_policy_json" {
  description = "An IAM policy document for what your handler itself does (writes to a table, reads other buckets); \"\": none."
  type        = string
  default     = ""
}

variable "memory_size" {
  description = "Function memory, MB."
  type        = number
  default     = 512
}

variable "timeout" {
  description = "Function timeout, seconds. Handlers are stopped a tenth of it (0.5 to 5 s) before the deadline and retried later."
  type        = number
  default     = 60
}

variable "batch_size" {
  description = "SQS messages per invocation (one S3 notification each; all are recorded in one ledger transaction)."
  type        = number
  default     = 10
}

variable "maximum_batching_window" {
  description = "Seconds the event source mapping may wait to fill a batch (0 to 300)."
  type        = number
  default     = 1
}

variable "maximum_concurrency" {
  description = "Most concurrent invocations from the queue (2 to 1000); null: no limit but the account's."
  type        = number
  default     = null
}

variable "max_receive_count" {
  description = "Deliveries of a message before the queue moves it to the dead-letter queue (a message that is no event, or whose events cannot be recorded)."
  type        = number
  default     = 5
}

variable "drain_schedule" {
  description = "EventBridge schedule of the drain: retries, work whose key was busy, claims of killed sandboxes."
  type        = string
  default     = "rate(1 minute)"
}

variable "jobs_schedule" {
  description = "EventBridge schedule of the jobs: the audit (when enabled) and the purge, then a drain."
  type        = string
  default     = "rate(1 hour)"
}

variable "log_retention_days" {
  description = "Days the function's logs are kept."
  type        = number
  default     = 30
}
