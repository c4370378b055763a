# cairn on AWS Lambda: a bucket's object changes go through an SQS queue (with
# a dead-letter queue) to a function whose bootstrap is the cairn binary
# (`cairn lambda`), which records them in the ledger and runs your handler
# once per change, in order per key; an EventBridge schedule drains what is
# left (retries, keys that were busy, the audit, the purge).
#
#   GOOS=linux GOARCH=arm64 go build -tags lambda.norpc -o bootstrap ./cmd/cairn
#   zip bootstrap.zip bootstrap handle.sh
#   terraform init && terraform apply -var bucket=my-bucket

terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "5.100.0"
    }
  }
}

provider "aws" {
  region = var.region
}

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}
data "aws_region" "current" {}

locals {
  arn_s3        = "arn:${data.aws_partition.current.partition}:s3:::"
  ledger_bucket = var.ledger_bucket != "" ? var.ledger_bucket : var.bucket
  ledger_prefix = trim(var.ledger_prefix, "/")
  ledger_url = {
    s3       = "s3://${local.ledger_bucket}/${local.ledger_prefix}"
    dynamodb = "dynamodb://${var.dynamodb_table}?region=${data.aws_region.current.name}"
    postgres = var.postgres_url
  }[var.ledger]
  handler = var.handler_http != "" ? { CAIRN_HANDLER_HTTP = var.handler_http } : { CAIRN_HANDLER_EXEC = var.handler_exec }
  audit   = var.audit ? { CAIRN_STORE = "s3://${var.bucket}", CAIRN_AUDIT = "true" } : {}
}

# ---- The queue: S3 notifications in, a dead-letter queue behind it --------

resource "aws_sqs_queue" "dead" {
  name                      = "${var.name}-dead"
  message_retention_seconds = 1209600 # 14 days: the most SQS keeps
}

resource "aws_sqs_queue" "events" {
  name = "${var.name}-events"
  # AWS's advice for a queue a function consumes: six times the function's
  # timeout plus the batching window, so a batch in flight is not delivered
  # again meanwhile.
  visibility_timeout_seconds = 6 * var.timeout + var.maximum_batching_window
  message_retention_seconds  = 1209600
  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dead.arn
    maxReceiveCount     = var.max_receive_count
  })
}

resource "aws_sqs_queue_redrive_allow_policy" "dead" {
  queue_url = aws_sqs_queue.dead.id
  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.events.arn]
  })
}

resource "aws_sqs_queue_policy" "events" {
  queue_url = aws_sqs_queue.events.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "BucketNotifications"
      Effect    = "Allow"
      Principal = { Service = "s3.amazonaws.com" }
      Action    = "sqs:SendMessage"
      Resource  = aws_sqs_queue.events.arn
      Condition = {
        ArnEquals    = { "aws:SourceArn" = "${local.arn_s3}${var.bucket}" }
        StringEquals = { "aws:SourceAccount" = data.aws_caller_identity.current.account_id }
      }
    }]
  })
}

resource "aws_s3_bucket_notification" "events" {
  bucket = var.bucket
  queue {
    queue_arn = aws_sqs_queue.events.arn
    # Lifecycle expirations are deletions, which S3 announces only as
    # LifecycleExpiration.
    events        = ["s3:ObjectCreated:*", "s3:ObjectRemoved:*", "s3:LifecycleExpiration:*"]
    filter_prefix = var.events_prefix != "" ? var.events_prefix : null
  }
  # S3 sends a test event to the queue, which it may send only once the
  # queue's policy allows it (cairn answers s3:TestEvent and records nothing).
  depends_on = [aws_sqs_queue_policy.events]
}

# ---- The ledger -----------------------------------------------------------

# The DynamoDB ledger's table (dynamoledger.Schema): key pk/sk, the "work"
# and "age" indexes, on-demand billing, TTL on expires_at for retention=.
resource "aws_dynamodb_table" "ledger" {
  count        = var.ledger == "dynamodb" ? 1 : 0
  name         = var.dynamodb_table
  billing_mode = "PAY_PER_REQUEST"
  hash_key     = "pk"
  range_key    = "sk"

  attribute {
    name = "pk"
    type = "S"
  }
  attribute {
    name = "sk"
    type = "S"
  }
  attribute {
    name = "wp"
    type = "S"
  }
  attribute {
    name = "ws"
    type = "N"
  }
  attribute {
    name = "ap"
    type = "S"
  }
  attribute {
    name = "as"
    type = "N"
  }

  global_secondary_index {
    name               = "work"
    hash_key           = "wp"
    range_key          = "ws"
    projection_type    = "INCLUDE"
    non_key_attributes = ["bucket", "key", "ident", "status"]
  }
  global_secondary_index {
    name               = "age"
    hash_key           = "ap"
    range_key          = "as"
    projection_type    = "INCLUDE"
    non_key_attributes = ["bucket", "key", "ident", "status"]
  }

  ttl {
    attribute_name = "expires_at"
    enabled        = true
  }
}

# ---- The function's role --------------------------------------------------

resource "aws_iam_role" "cairn" {
  name = "${var.name}-function"
  assume_role_policy = jsonencode({
    Version   = "2012-10-17"
    Statement = [{ Effect = "Allow", Principal = { Service = "lambda.amazonaws.com" }, Action = "sts:AssumeRole" }]
  })
}

resource "aws_iam_role_policy_attachment" "logs" {
  role       = aws_iam_role.cairn.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"
}

resource "aws_iam_role_policy_attachment" "vpc" {
  count      = length(var.subnet_ids) > 0 ? 1 : 0
  role       = aws_iam_role.cairn.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole"
}

locals {
  policy_statements = concat(
    [
      # The event source mapping reads the queue and deletes what was recorded.
      {
        Sid      = "Queue"
        Effect   = "Allow"
        Action   = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ChangeMessageVisibility"]
        Resource = aws_sqs_queue.events.arn
      },
      # The handler reads the objects it is told about; the audit lists them.
      {
        Sid      = "ReadEventsBucket"
        Effect   = "Allow"
        Action   = ["s3:GetObject"]
        Resource = "${local.arn_s3}${var.bucket}/${var.events_prefix}*"
      },
      {
        Sid      = "ListEventsBucket"
        Effect   = "Allow"
        Action   = ["s3:ListBucket"]
        Resource = "${local.arn_s3}${var.bucket}"
      },
    ],
    # The object-store ledger: its objects, and the capability probe's
    # scratch objects (conditional PUT, multipart completion, copy,
    # conditional delete), all under the ledger's prefix. HeadBucket (which
    # s3:ListBucket allows) identifies the server a saved probe verdict is for.
    var.ledger != "s3" ? [] : [
      {
        Sid      = "LedgerObjects"
        Effect   = "Allow"
        Action   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
        Resource = "${local.arn_s3}${local.ledger_bucket}/${local.ledger_prefix}/*"
      },
      {
        Sid      = "LedgerBucket"
        Effect   = "Allow"
        Action   = ["s3:ListBucket"]
        Resource = "${local.arn_s3}${local.ledger_bucket}"
      },
    ],
    # The DynamoDB ledger: the operations package dynamoledger makes on the
    # table and its two indexes.
    var.ledger != "dynamodb" ? [] : [
      {
        Sid    = "LedgerTable"
        Effect = "Allow"
        Action = ["dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem",
        "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:Query", "dynamodb:Scan"]
        Resource = [aws_dynamodb_table.ledger[0].arn, "${aws_dynamodb_table.ledger[0].arn}/index/*"]
      },
    ],
  )
}

resource "aws_iam_role_policy" "cairn" {
  name   = "cairn"
  role   = aws_iam_role.cairn.id
  policy = jsonencode({ Version = "2012-10-17", Statement = local.policy_statements })
}

resource "aws_iam_role_policy" "handler" {
  count  = var.extra_policy_json != "" ? 1 : 0
  name   = "handler"
  role   = aws_iam_role.cairn.id
  policy = var.extra_policy_json
}

# ---- The function ---------------------------------------------------------

resource "aws_cloudwatch_log_group" "cairn" {
  name              = "/aws/lambda/${var.name}"
  retention_in_days = var.log_retention_days
}

resource "aws_lambda_function" "cairn" {
  function_name    = var.name
  role             = aws_iam_role.cairn.arn
  runtime          = "provided.al2023"
  architectures    = ["arm64"]
  handler          = "bootstrap" # unused by a custom runtime; the zip's bootstrap runs
  filename         = var.bootstrap_zip
  source_code_hash = filebase64sha256(var.bootstrap_zip)
  memory_size      = var.memory_size
  timeout          = var.timeout

  environment {
    variables = merge({ CAIRN_LEDGER = local.ledger_url }, local.handler, local.audit, var.environment)
  }

  dynamic "vpc_config" {
    for_each = length(var.subnet_ids) > 0 ? [1] : []
    content {
      subnet_ids         = var.subnet_ids
      security_group_ids = var.security_group_ids
    }
  }

  depends_on = [aws_cloudwatch_log_group.cairn, aws_iam_role_policy_attachment.logs, aws_iam_role_policy.cairn]
}

# Each batch from the queue, answered with the messages to deliver again.
resource "aws_lambda_event_source_mapping" "events" {
  event_source_arn                   = aws_sqs_queue.events.arn
  function_name                      = aws_lambda_function.cairn.arn
  batch_size                         = var.batch_size
  maximum_batching_window_in_seconds = var.maximum_batching_window
  function_response_types            = ["ReportBatchItemFailures"]

  dynamic "scaling_config" {
    for_each = var.maximum_concurrency != null ? [1] : []
    content {
      maximum_concurrency = var.maximum_concurrency
    }
  }
}

# ---- The scheduled drain --------------------------------------------------

resource "aws_cloudwatch_event_rule" "drain" {
  name                = "${var.name}-drain"
  description         = "cairn: run what is due (retries, keys that were busy, claims of killed sandboxes)"
  schedule_expression = var.drain_schedule
}

resource "aws_cloudwatch_event_target" "drain" {
  rule  = aws_cloudwatch_event_rule.drain.name
  arn   = aws_lambda_function.cairn.arn
  input = jsonencode({ cairn = "drain" })
}

resource "aws_lambda_permission" "drain" {
  statement_id  = "cairn-drain"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.cairn.function_name
  principal     = "events.amazonaws.com"
  source_arn    = aws_cloudwatch_event_rule.drain.arn
}

# The jobs (the audit, when enabled, and the purge) come less often: an audit
# LISTs the whole bucket.
resource "aws_cloudwatch_event_rule" "jobs" {
  name                = "${var.name}-jobs"
  description         = "cairn: the audit and the purge, then what is due"
  schedule_expression = var.jobs_schedule
}

resource "aws_cloudwatch_event_target" "jobs" {
  rule  = aws_cloudwatch_event_rule.jobs.name
  arn   = aws_lambda_function.cairn.arn
  input = jsonencode({ cairn = "jobs" })
}

resource "aws_lambda_permission" "jobs" {
  statement_id  = "cairn-jobs"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.cairn.function_name
  principal     = "events.amazonaws.com"
  source_arn    = aws_cloudwatch_event_rule.jobs.arn
}
