{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Valid/ready streams: the glue between the blocks of a network.

Data travels forward as @Maybe a@ (@Nothing@ = no valid beat this cycle) and a
@Bool@ ready travels backward. A beat /moves/ in a cycle where the producer
shows @Just x@ and the consumer's ready is @True@; a producer keeps showing the
same @Just x@ until it has moved.

Rule for every block: its ready must not depend combinationally on its own
input's valid. Together with registered readies in the stateful blocks this
keeps the backward path free of combinational loops however blocks are chained.
-}
module K2C.Stream
  ( Stream
  , (|>)
  , mapS
  ) where

import Clash.Prelude

-- | A streaming block: (input beats, ready from downstream) to
-- (output beats, ready to upstream).
type Stream dom a b
  =  (Signal dom (Maybe a), Signal dom Bool)
  -> (Signal dom (Maybe b), Signal dom Bool)

infixl 1 |>

-- | Left-to-right composition: the output of the first block feeds the second,
-- and the second block's ready becomes the first block's downstream ready.
-- The @where@ bindings are lazy, which is what lets the ready path run
-- backwards while the data runs forwards.
(|>) :: Stream dom a b -> Stream dom b c -> Stream dom a c
(first |> second) (input, readyOut) = (output, readyIn)
  where
    (middle, readyIn)    = first (input, readyMid)
    (output, readyMid)   = second (middle, readyOut)

-- | A purely combinational stage. It holds nothing, so it is ready exactly when
-- its consumer is, and valid exactly when its producer is.
mapS :: (a -> b) -> Stream dom a b
mapS f (input, readyOut) = (fmap f <$> input, readyOut)
