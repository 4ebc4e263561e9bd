//! Which LLM API a request path calls, and which virtual-model `model_types` serve it.
//!
//! The mapping is the model-type table of the TrueFoundry seed ("Supported API Types"):
//! `chat` serves `/chat/completions` and the Anthropic `/messages`, `responses` serves
//! `/responses`, and so on. Paths are accepted with or without the `/v1` prefix.

/// An LLM endpoint the filter routes. Any other path passes through untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /v1/chat/completions`
    ChatCompletions,
    /// `POST /v1/completions`
    Completions,
    /// `POST /v1/embeddings`
    Embeddings,
    /// `POST /v1/responses`
    Responses,
    /// `POST /v1/messages` (Anthropic Messages API)
    Messages,
}

impl Endpoint {
    /// The endpoint a request path (query string allowed) calls, if it is one we route.
    pub fn from_path(path: &str) -> Option<Endpoint> {
        let path = path.split_once('?').map_or(path, |(p, _)| p);
        let path = path.strip_prefix("/v1").unwrap_or(path);
        let path = path.strip_suffix('/').unwrap_or(path);
        match path {
            "/chat/completions" => Some(Endpoint::ChatCompletions),
            "/completions" => Some(Endpoint::Completions),
            "/embeddings" => Some(Endpoint::Embeddings),
            "/responses" => Some(Endpoint::Responses),
            "/messages" => Some(Endpoint::Messages),
            _ => None,
        }
    }

    /// The path as users know it, for error messages.
    pub fn display_path(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "/v1/chat/completions",
            Endpoint::Completions => "/v1/completions",
            Endpoint::Embeddings => "/v1/embeddings",
            Endpoint::Responses => "/v1/responses",
            Endpoint::Messages => "/v1/messages",
        }
    }

    /// The model type a virtual model must list to serve this endpoint.
    pub fn model_type(self) -> ModelType {
        match self {
            Endpoint::ChatCompletions | Endpoint::Messages => ModelType::Chat,
            Endpoint::Completions => ModelType::Completion,
            Endpoint::Embeddings => ModelType::Embedding,
            Endpoint::Responses => ModelType::Responses,
        }
    }
}

/// A virtual model's `model_types` entry (TrueFoundry seed, "Supported API Types").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelType {
    /// `chat`
    Chat,
    /// `responses`
    Responses,
    /// `completion`
    Completion,
    /// `embedding`
    Embedding,
    /// `rerank`
    Rerank,
    /// `moderation`
    Moderation,
    /// `image`
    Image,
    /// `text_to_speech`
    TextToSpeech,
    /// `audio_transcription`
    AudioTranscription,
    /// `audio_translation`
    AudioTranslation,
}

impl ModelType {
    /// Every model type with its config name, in the seed's order.
    pub const ALL: [(ModelType, &'static str); 10] = [
        (ModelType::Chat, "chat"),
        (ModelType::Responses, "responses"),
        (ModelType::Completion, "completion"),
        (ModelType::Embedding, "embedding"),
        (ModelType::Rerank, "rerank"),
        (ModelType::Moderation, "moderation"),
        (ModelType::Image, "image"),
        (ModelType::TextToSpeech, "text_to_speech"),
        (ModelType::AudioTranscription, "audio_transcription"),
        (ModelType::AudioTranslation, "audio_translation"),
    ];

    /// Parses a config name such as `chat`.
    pub fn from_name(name: &str) -> Option<ModelType> {
        Self::ALL.iter().find(|(_, n)| *n == name).map(|(t, _)| *t)
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// A set of model types, as a bit set so the request path checks it without allocating.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelTypes(u16);

impl ModelTypes {
    /// Adds a type to the set.
    pub fn insert(&mut self, t: ModelType) {
        self.0 |= t.bit();
    }

    /// Whether the set holds the type.
    pub fn contains(self, t: ModelType) -> bool {
        self.0 & t.bit() != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_with_and_without_v1_prefix_are_recognised() {
        assert_eq!(
            Endpoint::from_path("/v1/chat/completions"),
            Some(Endpoint::ChatCompletions)
        );
        assert_eq!(
            Endpoint::from_path("/chat/completions"),
            Some(Endpoint::ChatCompletions)
        );
        assert_eq!(
            Endpoint::from_path("/v1/completions"),
            Some(Endpoint::Completions)
        );
        assert_eq!(
            Endpoint::from_path("/embeddings"),
            Some(Endpoint::Embeddings)
        );
        assert_eq!(
            Endpoint::from_path("/v1/responses"),
            Some(Endpoint::Responses)
        );
        assert_eq!(
            Endpoint::from_path("/v1/messages?beta=true"),
            Some(Endpoint::Messages)
        );
        assert_eq!(
            Endpoint::from_path("/v1/chat/completions/"),
            Some(Endpoint::ChatCompletions)
        );
    }

    #[test]
    fn other_paths_are_not_llm_endpoints() {
        for path in [
            "/",
            "/healthz",
            "/v1/models",
            "/v1/chat",
            "/v2/chat/completions",
            "/v1/responses/resp_1",
            "",
        ] {
            assert_eq!(Endpoint::from_path(path), None, "{path}");
        }
    }

    #[test]
    fn messages_is_served_by_chat_model_type() {
        assert_eq!(Endpoint::Messages.model_type(), ModelType::Chat);
        assert_eq!(Endpoint::Responses.model_type(), ModelType::Responses);
    }

    #[test]
    fn model_type_set_holds_what_was_inserted() {
        let mut set = ModelTypes::default();
        assert!(set.is_empty());
        set.insert(ModelType::Chat);
        set.insert(ModelType::AudioTranslation);
        assert!(set.contains(ModelType::Chat));
        assert!(set.contains(ModelType::AudioTranslation));
        assert!(!set.contains(ModelType::Embedding));
        assert_eq!(
            ModelType::from_name("text_to_speech"),
            Some(ModelType::TextToSpeech)
        );
        assert_eq!(ModelType::from_name("Chat"), None);
    }
}
