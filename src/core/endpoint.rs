//! Which LLM API a request path calls, and which virtual-model `model_types` serve it.
//!
//! The mapping is the model-type table of TrueFoundry virtual models ("Supported API Types"):
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
    /// `POST /v1/messages/count_tokens` (Anthropic): routed like `/v1/messages`, no retry
    /// model (Zuplo model load balancing, "Failures and retries").
    CountTokens,
    /// `POST /v2/rerank`
    Rerank,
    /// `POST /v1/moderations`
    Moderations,
    /// `POST /v1/images/generations`
    ImageGenerations,
    /// `POST /v1/audio/speech`
    Speech,
    /// `POST /v1/audio/transcriptions` (multipart)
    Transcriptions,
    /// `POST /v1/audio/translations` (multipart)
    Translations,
    /// `POST /v1/images/edits` (multipart)
    ImageEdits,
    /// `POST /v1/images/variations` (multipart)
    ImageVariations,
}

/// Each routed endpoint: its path (after an optional `/v1`), the endpoint, and its full path.
const ENDPOINTS: [(&str, Endpoint, &str); 14] = [
    (
        "/chat/completions",
        Endpoint::ChatCompletions,
        "/v1/chat/completions",
    ),
    ("/completions", Endpoint::Completions, "/v1/completions"),
    ("/embeddings", Endpoint::Embeddings, "/v1/embeddings"),
    ("/responses", Endpoint::Responses, "/v1/responses"),
    ("/messages", Endpoint::Messages, "/v1/messages"),
    (
        "/messages/count_tokens",
        Endpoint::CountTokens,
        "/v1/messages/count_tokens",
    ),
    ("/rerank", Endpoint::Rerank, "/v2/rerank"),
    ("/moderations", Endpoint::Moderations, "/v1/moderations"),
    (
        "/images/generations",
        Endpoint::ImageGenerations,
        "/v1/images/generations",
    ),
    ("/audio/speech", Endpoint::Speech, "/v1/audio/speech"),
    (
        "/audio/transcriptions",
        Endpoint::Transcriptions,
        "/v1/audio/transcriptions",
    ),
    (
        "/audio/translations",
        Endpoint::Translations,
        "/v1/audio/translations",
    ),
    ("/images/edits", Endpoint::ImageEdits, "/v1/images/edits"),
    (
        "/images/variations",
        Endpoint::ImageVariations,
        "/v1/images/variations",
    ),
];

impl Endpoint {
    /// The endpoint a request path (query string allowed) calls, if it is one we route.
    pub fn from_path(path: &str) -> Option<Endpoint> {
        let path = path.split_once('?').map_or(path, |(p, _)| p);
        let path = match path.strip_prefix("/v2") {
            // Rerank lives under /v2 (TrueFoundry virtual models, "Supported API Types"); nothing
            // else does.
            Some("/rerank" | "/rerank/") => "/rerank",
            Some(_) => return None,
            None => path.strip_prefix("/v1").unwrap_or(path),
        };
        let path = path.strip_suffix('/').unwrap_or(path);
        ENDPOINTS
            .iter()
            .find(|(p, _, _)| *p == path)
            .map(|(_, e, _)| *e)
    }

    /// The native API a model must serve for this endpoint.
    pub fn api(self) -> Api {
        match self {
            Endpoint::ChatCompletions => Api::ChatCompletions,
            Endpoint::Completions => Api::Completions,
            Endpoint::Embeddings => Api::Embeddings,
            Endpoint::Responses => Api::Responses,
            Endpoint::Messages | Endpoint::CountTokens => Api::Messages,
            Endpoint::Rerank => Api::Rerank,
            Endpoint::Moderations => Api::Moderations,
            Endpoint::ImageGenerations | Endpoint::ImageEdits | Endpoint::ImageVariations => {
                Api::Images
            }
            Endpoint::Speech | Endpoint::Transcriptions | Endpoint::Translations => Api::Audio,
        }
    }

    /// Whether a model serving `apis` serves this endpoint natively. Switchboard never
    /// translates between APIs (TrueFoundry virtual models, "Supported API Types": every target
    /// must support the operation called; "Responses API conversations": natively).
    pub fn served_by(self, apis: Apis) -> bool {
        apis.contains(self.api())
    }

    /// The path without its version prefix (`/chat/completions`, `/rerank`): what follows a
    /// catalog model's `base_path`.
    pub fn unversioned_path(self) -> &'static str {
        ENDPOINTS
            .iter()
            .find(|(_, e, _)| *e == self)
            .map_or("", |(path, _, _)| *path)
    }

    /// The version prefix of its canonical path: `/v2` for rerank, `/v1` for the rest.
    pub fn version_prefix(self) -> &'static str {
        match self {
            Endpoint::Rerank => "/v2",
            _ => "/v1",
        }
    }

    /// The canonical path (`/v1/chat/completions`, `/v2/rerank`): what a model without a
    /// `base_path` is called on, and how users know the endpoint in error messages.
    pub fn display_path(self) -> &'static str {
        ENDPOINTS
            .iter()
            .find(|(_, e, _)| *e == self)
            .map_or("", |(_, _, full)| *full)
    }

    /// The model type a virtual model must list to serve this endpoint.
    pub fn model_type(self) -> ModelType {
        match self {
            Endpoint::ChatCompletions | Endpoint::Messages | Endpoint::CountTokens => {
                ModelType::Chat
            }
            Endpoint::Completions => ModelType::Completion,
            Endpoint::Embeddings => ModelType::Embedding,
            Endpoint::Responses => ModelType::Responses,
            Endpoint::Rerank => ModelType::Rerank,
            Endpoint::Moderations => ModelType::Moderation,
            Endpoint::ImageGenerations => ModelType::Image,
            Endpoint::Speech => ModelType::TextToSpeech,
            Endpoint::Transcriptions => ModelType::AudioTranscription,
            Endpoint::Translations => ModelType::AudioTranslation,
            Endpoint::ImageEdits | Endpoint::ImageVariations => ModelType::Image,
        }
    }

    /// Whether requests to it carry a conversation (messages or Responses input): the others
    /// (embeddings, moderations, images, audio) have no user message.
    pub fn is_conversation(self) -> bool {
        matches!(
            self,
            Endpoint::ChatCompletions
                | Endpoint::Responses
                | Endpoint::Messages
                | Endpoint::CountTokens
        )
    }

    /// Whether errors go in Anthropic's shape: Anthropic SDK clients call these.
    pub fn speaks_anthropic(self) -> bool {
        matches!(self, Endpoint::Messages | Endpoint::CountTokens)
    }

    /// Whether a request gets no other model after its first (Zuplo model load balancing,
    /// "Failures and retries": `count_tokens` requests get no retry model).
    pub fn single_target(self) -> bool {
        self == Endpoint::CountTokens
    }

    /// Whether the body is `multipart/form-data` (an upload) rather than JSON.
    pub fn is_multipart(self) -> bool {
        matches!(
            self,
            Endpoint::Transcriptions
                | Endpoint::Translations
                | Endpoint::ImageEdits
                | Endpoint::ImageVariations
        )
    }
}

/// A native API a catalog model serves (`models[].apis`): what decides whether it can be a target
/// of an endpoint. Zuplo model load balancing, "Endpoints": eligibility depends on the provider and
/// on whether the model is Claude (Claude on Azure AI or Bedrock serves `/v1/messages`; the GPT
/// models there serve `/v1/responses`), so the provider only gives the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `chat_completions`: `/v1/chat/completions`
    ChatCompletions,
    /// `completions`: `/v1/completions`
    Completions,
    /// `embeddings`: `/v1/embeddings`
    Embeddings,
    /// `responses`: `/v1/responses`
    Responses,
    /// `messages`: the Anthropic Messages API, `/v1/messages`
    Messages,
    /// `rerank`: `/v2/rerank`
    Rerank,
    /// `moderations`: `/v1/moderations`
    Moderations,
    /// `images`: `/v1/images/generations`, `/edits` and `/variations`
    Images,
    /// `audio`: `/v1/audio/speech`, `/transcriptions` and `/translations`
    Audio,
}

impl Api {
    /// Every API with its config name.
    pub const ALL: [(Api, &'static str); 9] = [
        (Api::ChatCompletions, "chat_completions"),
        (Api::Completions, "completions"),
        (Api::Embeddings, "embeddings"),
        (Api::Responses, "responses"),
        (Api::Messages, "messages"),
        (Api::Rerank, "rerank"),
        (Api::Moderations, "moderations"),
        (Api::Images, "images"),
        (Api::Audio, "audio"),
    ];

    /// Parses a config name such as `chat_completions`.
    pub fn from_name(name: &str) -> Option<Api> {
        Self::ALL.iter().find(|(_, n)| *n == name).map(|(a, _)| *a)
    }

    /// The config name.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(a, _)| *a == self)
            .map_or("", |(_, n)| *n)
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// A set of APIs, as a bit set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Apis(u16);

impl Apis {
    /// The set of these APIs.
    pub fn of(apis: &[Api]) -> Apis {
        let mut set = Apis::default();
        for a in apis {
            set.insert(*a);
        }
        set
    }

    /// Adds an API.
    pub fn insert(&mut self, a: Api) {
        self.0 |= a.bit();
    }

    /// Whether the set holds the API.
    pub fn contains(self, a: Api) -> bool {
        self.0 & a.bit() != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// A virtual model's `model_types` entry (TrueFoundry virtual models, "Supported API Types").
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
    /// Every model type with its config name, in the order of TrueFoundry virtual models,
    /// "Supported API Types".
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
    fn every_seed_json_endpoint_is_recognised_and_maps_to_its_model_type() {
        assert_eq!(Endpoint::from_path("/v2/rerank"), Some(Endpoint::Rerank));
        assert_eq!(
            Endpoint::from_path("/v1/moderations"),
            Some(Endpoint::Moderations)
        );
        assert_eq!(
            Endpoint::from_path("/images/generations"),
            Some(Endpoint::ImageGenerations)
        );
        assert_eq!(
            Endpoint::from_path("/v1/audio/speech"),
            Some(Endpoint::Speech)
        );
        assert_eq!(Endpoint::Rerank.model_type(), ModelType::Rerank);
        assert_eq!(Endpoint::Speech.display_path(), "/v1/audio/speech");
        for (_, e, full) in ENDPOINTS {
            assert_eq!(Endpoint::from_path(full), Some(e), "{full}");
            assert_eq!(e.display_path(), full);
        }
    }

    #[test]
    fn declared_apis_serve_their_endpoints() {
        // Claude through Azure AI: declared, it serves /v1/messages.
        assert!(Endpoint::Messages.served_by(Apis::of(&[Api::Messages])));
        assert!(Endpoint::ImageEdits.served_by(Apis::of(&[Api::Images])));
        assert_eq!(
            Api::from_name("chat_completions"),
            Some(Api::ChatCompletions)
        );
        assert_eq!(Api::from_name("chat"), None);
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
