output "function_name" {
  description = "The function: invoke it with {\"cairn\":\"drain\"} to drain by hand."
  value       = aws_lambda_function.cairn.function_name
}

output "function_arn" {
  value = aws_lambda_function.cairn.arn
}

output "role_arn" {
  description = "The function's role, for policies of your own."
  value       = aws_iam_role.cairn.arn
}

output "queue_url" {
  description = "The queue the bucket's notifications go to."
  value       = aws_sqs_queue.events.url
}

output "dead_letter_queue_url" {
  description = "Messages delivered max_receive_count times without being recorded (no event at all, or a ledger that was down)."
  value       = aws_sqs_queue.dead.url
}

output "ledger_url" {
  description = "CAIRN_LEDGER: cairn ledger ls --ledger URL lists the records."
  value       = local.ledger_url
  sensitive   = true
}
