# terraform test: plans the template for each kind of ledger against a mocked
# AWS provider (no account, no network) and checks what cairn relies on.
# The Go test deploy/lambda/terraform_test.go runs it.

mock_provider "aws" {
  mock_data "aws_region" {
    defaults = { name = "eu-west-1" }
  }
  mock_data "aws_partition" {
    defaults = { partition = "aws" }
  }
  mock_data "aws_caller_identity" {
    defaults = { account_id = "123456789012" }
  }
}

override_resource {
  target          = aws_sqs_queue.events
  override_during = plan
  values          = { arn = "arn:aws:sqs:eu-west-1:123456789012:cairn-events", id = "https://sqs.eu-west-1.amazonaws.com/123456789012/cairn-events" }
}

override_resource {
  target          = aws_sqs_queue.dead
  override_during = plan
  values          = { arn = "arn:aws:sqs:eu-west-1:123456789012:cairn-dead", id = "https://sqs.eu-west-1.amazonaws.com/123456789012/cairn-dead" }
}

override_resource {
  target          = aws_dynamodb_table.ledger
  override_during = plan
  values          = { arn = "arn:aws:dynamodb:eu-west-1:123456789012:table/cairn-ledger" }
}

variables {
  bucket        = "events"
  bootstrap_zip = "main.tf" # plan only hashes it
}

run "object_store_ledger" {
  command = plan

  assert {
    condition = (aws_lambda_function.cairn.runtime == "provided.al2023" && aws_lambda_function.cairn.architectures == tolist(["arm64"]) &&
    aws_lambda_function.cairn.handler == "bootstrap")
    error_message = "the function must be a custom runtime (provided.al2023, arm64) running bootstrap"
  }
  assert {
    condition = aws_lambda_function.cairn.environment[0].variables == tomap({
      CAIRN_LEDGER = "s3://events/cairn-ledger", CAIRN_HANDLER_EXEC = "./handle.sh"
    })
    error_message = "environment ${jsonencode(aws_lambda_function.cairn.environment[0].variables)}"
  }
  assert {
    condition     = aws_lambda_event_source_mapping.events.function_response_types == toset(["ReportBatchItemFailures"])
    error_message = "the SQS event source mapping must report partial batch failures"
  }
  assert {
    condition     = jsondecode(aws_sqs_queue.events.redrive_policy) == { deadLetterTargetArn = "arn:aws:sqs:eu-west-1:123456789012:cairn-dead", maxReceiveCount = 5 }
    error_message = "redrive policy ${aws_sqs_queue.events.redrive_policy}"
  }
  assert {
    condition     = aws_sqs_queue.events.visibility_timeout_seconds >= 6 * aws_lambda_function.cairn.timeout
    error_message = "the queue's visibility timeout must be at least six times the function's timeout"
  }
  assert {
    condition = (one(aws_s3_bucket_notification.events.queue).queue_arn == "arn:aws:sqs:eu-west-1:123456789012:cairn-events" &&
    one(aws_s3_bucket_notification.events.queue).events == toset(["s3:ObjectCreated:*", "s3:ObjectRemoved:*", "s3:LifecycleExpiration:*"]))
    error_message = "the bucket must announce creations, removals and lifecycle expirations to the queue"
  }
  assert {
    condition = jsondecode(aws_sqs_queue_policy.events.policy).Statement[0].Condition == {
      ArnEquals = { "aws:SourceArn" = "arn:aws:s3:::events" }, StringEquals = { "aws:SourceAccount" = "123456789012" }
    }
    error_message = "only the bucket may send to the queue: ${aws_sqs_queue_policy.events.policy}"
  }
  assert {
    condition = {
      for s in jsondecode(aws_iam_role_policy.cairn.policy).Statement : s.Sid => s.Resource if startswith(s.Sid, "Ledger")
      } == {
      LedgerObjects = "arn:aws:s3:::events/cairn-ledger/*", LedgerBucket = "arn:aws:s3:::events"
    }
    error_message = "object-store ledger permissions: ${aws_iam_role_policy.cairn.policy}"
  }
  assert {
    condition     = jsondecode(aws_cloudwatch_event_target.drain.input) == { cairn = "drain" } && aws_cloudwatch_event_rule.drain.schedule_expression == "rate(1 minute)"
    error_message = "the schedule must invoke the function with the drain payload"
  }
  assert {
    condition     = jsondecode(aws_cloudwatch_event_target.jobs.input) == { cairn = "jobs" } && aws_cloudwatch_event_rule.jobs.schedule_expression == "rate(1 hour)"
    error_message = "a second schedule must invoke the function with the jobs payload"
  }
  assert {
    condition     = aws_lambda_permission.drain.principal == "events.amazonaws.com" && length(aws_dynamodb_table.ledger) == 0 && length(aws_lambda_function.cairn.vpc_config) == 0
    error_message = "EventBridge may invoke the function; no table, no VPC"
  }
}

run "ledger_elsewhere_http_handler_audit" {
  command = plan
  variables {
    ledger_bucket = "ledgers"
    ledger_prefix = "/fn-a/"
    handler_http  = "https://handler.internal/run"
    audit         = true
    events_prefix = "incoming/"
    environment   = { CAIRN_CONCURRENCY = "4", CAIRN_POISON = "ledger" }
  }
  assert {
    condition = aws_lambda_function.cairn.environment[0].variables == tomap({
      CAIRN_LEDGER = "s3://ledgers/fn-a", CAIRN_HANDLER_HTTP = "https://handler.internal/run", CAIRN_STORE = "s3://events",
      CAIRN_AUDIT  = "true", CAIRN_CONCURRENCY = "4", CAIRN_POISON = "ledger"
    })
    error_message = "environment ${jsonencode(aws_lambda_function.cairn.environment[0].variables)}"
  }
  assert {
    condition = {
      for s in jsondecode(aws_iam_role_policy.cairn.policy).Statement : s.Sid => s.Resource
      } == {
      Queue            = "arn:aws:sqs:eu-west-1:123456789012:cairn-events", ReadEventsBucket = "arn:aws:s3:::events/incoming/*",
      ListEventsBucket = "arn:aws:s3:::events", LedgerObjects = "arn:aws:s3:::ledgers/fn-a/*", LedgerBucket = "arn:aws:s3:::ledgers"
    }
    error_message = "permissions: ${aws_iam_role_policy.cairn.policy}"
  }
  assert {
    condition     = one(aws_s3_bucket_notification.events.queue).filter_prefix == "incoming/"
    error_message = "the notification must filter by events_prefix"
  }
}

run "dynamodb_ledger" {
  command = plan
  variables {
    ledger = "dynamodb"
  }
  assert {
    condition     = aws_lambda_function.cairn.environment[0].variables["CAIRN_LEDGER"] == "dynamodb://cairn-ledger?region=eu-west-1"
    error_message = "ledger ${aws_lambda_function.cairn.environment[0].variables["CAIRN_LEDGER"]}"
  }
  assert {
    condition = (aws_dynamodb_table.ledger[0].hash_key == "pk" && aws_dynamodb_table.ledger[0].range_key == "sk" &&
      aws_dynamodb_table.ledger[0].billing_mode == "PAY_PER_REQUEST" &&
      toset([for i in aws_dynamodb_table.ledger[0].global_secondary_index : "${i.name}:${i.hash_key}:${i.range_key}:${i.projection_type}"]) == toset(["work:wp:ws:INCLUDE", "age:ap:as:INCLUDE"]) &&
    one(aws_dynamodb_table.ledger[0].ttl).attribute_name == "expires_at")
    error_message = "the table must have dynamoledger.Schema"
  }
  assert {
    condition = [for s in jsondecode(aws_iam_role_policy.cairn.policy).Statement : s.Resource if startswith(s.Sid, "Ledger")] == [[
      "arn:aws:dynamodb:eu-west-1:123456789012:table/cairn-ledger", "arn:aws:dynamodb:eu-west-1:123456789012:table/cairn-ledger/index/*"
    ]]
    error_message = "DynamoDB ledger permissions: ${aws_iam_role_policy.cairn.policy}"
  }
}

run "postgres_ledger" {
  command = plan
  variables {
    ledger             = "postgres"
    postgres_url       = "postgres://cairn:secret@db.internal:5432/cairn?sslmode=require"
    subnet_ids         = ["subnet-1", "subnet-2"]
    security_group_ids = ["sg-1"]
  }
  assert {
    condition     = nonsensitive(aws_lambda_function.cairn.environment[0].variables["CAIRN_LEDGER"]) == "postgres://cairn:secret@db.internal:5432/cairn?sslmode=require"
    error_message = "the PostgreSQL URL must be the ledger"
  }
  assert {
    condition     = one(aws_lambda_function.cairn.vpc_config).subnet_ids == toset(["subnet-1", "subnet-2"]) && length(aws_iam_role_policy_attachment.vpc) == 1
    error_message = "the function must run in the database's subnets"
  }
  assert {
    condition     = length([for s in jsondecode(aws_iam_role_policy.cairn.policy).Statement : s if startswith(s.Sid, "Ledger")]) == 0
    error_message = "no S3 or DynamoDB ledger permissions for a PostgreSQL ledger"
  }
}

run "unknown_ledger" {
  command = plan
  variables {
    ledger = "sqlite"
  }
  expect_failures = [var.ledger]
}
